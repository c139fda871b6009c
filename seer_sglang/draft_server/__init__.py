"""The grouped draft server (its own process) and the client library the SGLang instances use to
keep local replicas of the groups they serve."""
