"""Reading and writing files safely: bounded regular-file inputs, safetensors headers and writer, JSON, atomic writes, escaping."""
