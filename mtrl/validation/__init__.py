"""Dataset validation shared by the pipeline's validate step and `mtrl validate` (``dataset``, ``sources``), and the
one JSONL row reader (``rows``). Nothing is imported here: a Lambda, a worker or the trainer image that reads rows
loads ``rows`` alone, not the validator and its parsers."""
