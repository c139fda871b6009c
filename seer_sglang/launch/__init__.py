"""Starting the processes of a run, in the launcher's process: the SGLang instances, the global KV
pool (its directory, or a local Mooncake), and the draft server."""
