"""The global KV pool: SGLang's HiCache with a shared L3 (a directory, or Mooncake), so a chunk that
moves to another instance loads its prompt + generated KV instead of prefilling it again."""
