"""The layer beneath every benchmark script: workloads, emulation counters, the simulator's view of a run,
targets, and the one writer and reader of result folders. It imports no benchmark script, so each script
can import it without pulling in another script's command line or heavy imports."""
