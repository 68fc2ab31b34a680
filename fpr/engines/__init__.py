"""Where the evaluation pipeline runs beyond one process: the Ray engine and its resumable shards."""
