"""The CUDA + NCCL installation as repository @cuda, or a stand-in when there is none.

With /usr/local/cuda (or $OCTOPIPE_CUDA_PATH) holding include/nccl.h, `@cuda` is the real
library (headers, -lcudart -lnccl). Without it, `@cuda` only defines OCTOPIPE_NO_CUDA, so the
NCCL transport still compiles and reports at run time that this build has no CUDA — the rest
of the project never depends on a GPU toolkit being present.
"""

def _cuda_repository_impl(ctx):
    root = ctx.path(ctx.os.environ.get("OCTOPIPE_CUDA_PATH", "/usr/local/cuda"))
    has_cuda = root.exists and root.get_child("include").get_child("nccl.h").exists
    if has_cuda:
        ctx.symlink(root.get_child("include"), "include")
        ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-lcudart",
        "-lnccl",
    ],
)
""".format(lib = str(root) + "/lib64"))
    else:
        ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

# No CUDA installation was found at build time: the NCCL transport reports that at run time.
cc_library(
    name = "cuda",
    defines = ["OCTOPIPE_NO_CUDA"],
)
""")

cuda_repository = repository_rule(
    implementation = _cuda_repository_impl,
    environ = ["OCTOPIPE_CUDA_PATH"],
    local = True,
)
