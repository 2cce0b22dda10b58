"""Chapter 5: CUDA Graphs and launch overhead."""
