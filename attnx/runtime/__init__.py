"""What every layer runs on: the thread policy and the CPUs, flat parameter buffers,
workspace caches, input checks, progress bars and shared type aliases."""
