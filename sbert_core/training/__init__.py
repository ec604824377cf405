"""Fine-tuning an encoder: the paper's recipe, resumable and data-parallel.

The run's config (``config``), the loop (``loop``), the optimizer and its learning-rate
schedule (``optimizer``), checkpoints (``checkpoint``), processes and devices
(``distributed``), the losses (``losses``), batches and samplers (``batches``,
``group_batches``), training examples (``data``), hard negatives (``hard_negatives``)
and labelled duplicate pairs (``duplicate_pairs``).
"""
