"""What every Spark job runs on: the session (:mod:`.session`, :mod:`.java`), checkpoints
(:mod:`.checkpoint`), errors raised in executor tasks (:mod:`.failures`) and table locations
(:mod:`.tables`)."""
