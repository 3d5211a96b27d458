"""Protobuf / gRPC C++ code generation with Debian's protoc and grpc_cpp_plugin."""

def octopipe_proto(name, src, deps = [], grpc = False, visibility = None):
    """Generates and compiles C++ for one .proto file.

    Args:
      name: the cc_library to define (e.g. "model_cc_proto").
      src: the .proto file in this package.
      deps: other octopipe_proto libraries this proto imports.
      grpc: also generate gRPC service stubs.
      visibility: of the cc_library and of the .proto sources (the generator stays private).
    """
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    cmd = "protoc --proto_path=. --cpp_out=$(GENDIR) "
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        cmd += "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=$$(which grpc_cpp_plugin) "
    pkg = native.package_name()
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd + pkg + "/" + src,
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = [src] + [d + "_srcs" for d in deps],
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
