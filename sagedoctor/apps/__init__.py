"""The apps sagedoctor serves, each with its own switch: InvokeAI (its attention backend in
invokeai.yaml) and ComfyUI (its --use-sage-attention flag, its portable and desktop builds)."""
