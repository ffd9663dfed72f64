"""The edge where a user's inputs are read: the served logs in their owners' names and shapes,
the cluster table, judged runs, turned into the contract here, so that rules, gates and writers
only ever see the contract (docs/inputs.md). Its file-level answers (which files, which days,
ready markers, damaged files) need neither Spark nor PySpark."""
