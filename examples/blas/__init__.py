"""Chapter 3: BLAS, the vocabulary under every matmul."""
