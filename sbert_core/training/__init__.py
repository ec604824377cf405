"""Fine-tuning an encoder or a cross-encoder: the paper's recipe, resumable and data-parallel.

The run's config (``config``), the step loop both trainers share (``step_loop``), the
bi-encoder's trainer (``loop``) and the cross-encoder's (``cross_encoder_fit``, with its start
``cross_encoder_start``, data ``cross_encoder_data`` and evaluation ``cross_encoder_eval``),
the optimizer and its learning-rate schedule (``optimizer``), checkpoints (``checkpoint``),
processes and devices (``distributed``), the losses (``losses``), batches and samplers
(``batches``, ``group_batches``), training examples (``data``), hard negatives
(``hard_negatives``) and labelled duplicate pairs (``duplicate_pairs``).
"""
