#!/usr/bin/python3
"""A cluster scheduler's side of OctoPipe, in Python: create a job on the planner, watch its
plan versions, and report a node failure (the planner re-plans the job on the devices left).

Run it with Debian's interpreter (/usr/bin/python3, package python3-grpcio) and stubs generated
by Debian's protoc and gRPC plugin from the repository's proto/ directory:

  protoc -I. --python_out=OUT --grpc_out=OUT \
      --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin proto/*.proto
  PYTHONPATH=OUT /usr/bin/python3 examples/python/scheduler_client.py \
      --planner=127.0.0.1:50051 --model=examples/models/llama3-8b.json \
      --cluster=examples/clusters/h100-4nodes.json --devices=16 --fail_node=node3

Every step prints one line; the exit code is 0 only when the job got its first plan and, with
--fail_node, a re-plan for the node failure on the nodes left.
"""

import argparse
import sys

import grpc
from google.protobuf import json_format

from proto import cluster_pb2, model_pb2, plan_pb2, planner_pb2, planner_pb2_grpc


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--planner", required=True, help="HOST:PORT of octopipe-planner")
    p.add_argument("--model", required=True, help="model file (protobuf JSON of Model)")
    p.add_argument("--cluster", required=True, help="cluster file (protobuf JSON of Cluster)")
    p.add_argument("--devices", type=int, default=0, help="pipeline devices (0: every device)")
    p.add_argument("--microbatches", type=int, default=0, help="0: the model's own")
    p.add_argument("--time_budget_s", type=float, default=2.0, help="tuning budget per plan")
    p.add_argument("--name", default="python-scheduler", help="job name")
    p.add_argument("--fail_node", default="", help="report this node failed after the 1st plan")
    p.add_argument("--token_file", default="", help="bearer token for mutating calls")
    p.add_argument("--tls_ca", default="", help="CA certificate (PEM): connect with TLS")
    p.add_argument("--timeout_s", type=float, default=60.0, help="deadline of each call/wait")
    return p.parse_args(argv)


def load(path, message):
    with open(path, encoding="utf-8") as f:
        return json_format.Parse(f.read(), message)


def channel_for(args):
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            return grpc.secure_channel(args.planner, grpc.ssl_channel_credentials(f.read()))
    return grpc.insecure_channel(args.planner)


def reason_text(plan_version):
    """Why the version was planned, as text ("node_failure"): from the typed `reason_kind`
    (PLAN_REASON_NODE_FAILURE), or the deprecated `reason` string an older planner sends."""
    if plan_version.reason_kind == plan_pb2.PLAN_REASON_UNSPECIFIED:
        return plan_version.reason
    return plan_pb2.PlanReason.Name(plan_version.reason_kind)[len("PLAN_REASON_"):].lower()


def devices_by_node(plan_version, cluster, excluded=()):
    """Set of node names whose devices the plan's stages use. A plan numbers the devices of the
    nodes the job still uses (the cluster without its excluded nodes), node by node."""
    owner = []
    for node in cluster.nodes:
        if node.name not in excluded:
            owner += [node.name] * node.num_devices
    used = set()
    for stage in plan_version.result.plan.stages:
        if 0 <= stage.device < len(owner):
            used.add(owner[stage.device])
    return used


def main(argv):
    args = parse_args(argv)
    metadata = []
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            metadata = [("authorization", "Bearer " + f.read().strip())]

    model = load(args.model, model_pb2.Model())
    cluster = load(args.cluster, cluster_pb2.Cluster())
    stub = planner_pb2_grpc.PlannerStub(channel_for(args))

    options = planner_pb2.PlanOptions(num_devices=args.devices,
                                      num_microbatches=args.microbatches,
                                      time_budget_s=args.time_budget_s, seed=1,
                                      objective_kind=plan_pb2.PLAN_OBJECTIVE_SYNCHRONOUS)
    job = stub.CreateJob(planner_pb2.CreateJobRequest(name=args.name, model=model,
                                                      cluster=cluster, options=options),
                         metadata=metadata, timeout=args.timeout_s)
    print(f"created {job.id} ({job.name})", flush=True)

    watch = stub.WatchPlan(planner_pb2.WatchPlanRequest(job_id=job.id),
                           metadata=metadata, timeout=args.timeout_s)
    first = next(watch)
    r = first.result
    print(f"plan v{first.version} ({reason_text(first)}): feasible={r.feasible} "
          f"iteration={r.plan.predicted.iteration_time_s:.6g}s "
          f"speedup_vs_best_baseline={r.speedup_vs_best_baseline:.3f} "
          f"nodes={sorted(devices_by_node(first, cluster))}", flush=True)
    if not args.fail_node:
        watch.cancel()
        return 0 if r.feasible else 3

    stub.ReportNodeFailure(planner_pb2.NodeRequest(node_id=args.fail_node,
                                                   reason="scheduler: node lost"),
                           metadata=metadata, timeout=args.timeout_s)
    print(f"reported {args.fail_node} failed", flush=True)
    excluded = set(stub.GetJob(planner_pb2.GetJobRequest(job_id=job.id), metadata=metadata,
                               timeout=args.timeout_s).job.excluded_nodes)
    print(f"{job.id} excludes {sorted(excluded)}", flush=True)
    if args.fail_node not in excluded:
        print(f"error: the planner does not exclude {args.fail_node}", file=sys.stderr)
        return 1
    for version in watch:
        used = devices_by_node(version, cluster, excluded)
        print(f"plan v{version.version} ({reason_text(version)}): "
              f"feasible={version.result.feasible} nodes={sorted(used)}", flush=True)
        if version.version > first.version:
            watch.cancel()
            if version.reason_kind != plan_pb2.PLAN_REASON_NODE_FAILURE:
                print(f"error: v{version.version} has reason {reason_text(version)!r}, want "
                      "'node_failure'", file=sys.stderr)
                return 1
            return 0
    print("error: the watch ended without a re-plan", file=sys.stderr)
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except grpc.RpcError as e:
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(2)
