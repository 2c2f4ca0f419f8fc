"""Keys: what determines a job's outputs, reduced to one digest per job.

``key`` holds the recipe; ``digests`` (file contents), ``toolchain`` (the compiler's
identity) and ``shard_key`` (canonical summary shards) its ingredients; ``compute`` keys a
whole job file. Nothing here touches the store's bytes: the store is only a memo.
"""
