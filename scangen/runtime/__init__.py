"""Running on the GPU: PyCUDA and the device (gpu.py), the CUDA context (contexts.py), streams
(streams.py), pooled and per-stream device memory (pool.py, scratch.py), the GPU thread
(gpu_thread.py), and plans bound to compiled kernels (launcher.py). The only package besides
scangen.compile that imports pycuda, and only when called."""
