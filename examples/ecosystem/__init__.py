"""Chapter 7: the CUDA library ecosystem."""
