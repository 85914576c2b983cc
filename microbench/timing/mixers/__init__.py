"""The mixers' decode and prefill kernels beyond attention, as workloads ``timing.measure.build_workload`` builds:
the recurrent ones (``recurrent``: Gated DeltaNet's and Mamba-2's state update and chunked scan, their torch math in
``recurrent_math``) and DeepSeek's sparse attention (``sparse_attention``)."""
