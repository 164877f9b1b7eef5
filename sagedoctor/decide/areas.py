"""The areas a check covers, in report order."""

AREAS = ("system", "gpu", "python", "torch", "triton", "sageattention", "toolchain", "invokeai",
         "comfyui")
