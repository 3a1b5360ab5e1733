"""A checkpoint on disk and in memory: its config, submodel tables, file checks, safetensors
reading, weights (dense and packed), quantized formats and submodel extraction."""
