"""The grouping library: duplicate groups from similar pairs, below the stages (Beam-free).

Items are the rows ``0 .. n-1``; pairs are :class:`~sbert_pipeline.grouping.pairs.IndexedPairs`
(``a < b``, float32 scores). The modules, by idea:

* ``choices``: the method names, keep policies and defaults (numpy-free, for options);
* ``pairs``: the pairs over rows, score look-ups and the input checks;
* ``model``: :class:`~sbert_pipeline.grouping.model.Grouping`, the one model of a grouping;
* ``methods``: one dispatch table of every method (components, ranked, star, split, mutual,
  average), with ``adjacency`` (the ranked rule) and ``linkage`` (average linkage);
* ``ranking``: which member of a group is kept (the keep policies' orders);
* ``sweep``: component counts over a threshold grid in one pass; ``compare``: every method
  over the sweep, with the settings they run with;
* ``labels``: precision / recall / F1 of "both in one group" on labelled pairs;
* ``copies``: rows that copy another row's normalised text, joined to its group.

Components come from :mod:`sbert_core.graph`, the project's one components helper. Nothing
here imports Beam or a stage package.
"""
