"""Inference: running a model folder to embeddings.

The encoder (``encoder``) and its settings shared by every command
(``encoder_settings``), what it returns (``encode_result``), tokenising
(``tokenizing``), smart batching (``batching``), compute paths and dtypes
(``compute_paths``, ``precision``), the OpenVINO CPU backend (``openvino_path``), CPU
features (``cpu_features``) and the texts the int8 path calibrates on
(``calibration_texts``).

It imports the model format (sbert_core/model/), never training or evaluation.
"""
