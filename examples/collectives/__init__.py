"""Chapter 6: NCCL and collective communication."""
