"""The model format: a sentence-transformers model folder, read, checked and written.

The artifact and its file list (``artifact``), ``modules.json`` and the module chain
(``module_chain``), the modules after pooling (``head_modules``), pooling (``pooling``),
prompts (``prompts``), saving a folder (``export``), weight and config checks
(``weight_checks``, ``config_bounds``, ``safetensors_header``), which transformers class
runs a config (``architectures``), the JSON files (``json_files``), a model name to a
folder (``source``) and what a folder holds, read without its weights (``info``).

Nothing here imports the other subpackages; inference, training and evaluation build
on it.
"""
