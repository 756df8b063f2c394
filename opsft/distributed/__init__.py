"""Multi-process training with PyTorch distributed (torchrun): DDP for small models, FSDP2 for large ones.

- ``world``: the job's ranks and device, and the check that the world size divides the global batch;
- ``layout``: one tensor laid out like one parameter (a mask sharded like it, a basis replicated);
- ``parallel``: wrapping (DDP) or sharding (FSDP2) a model; a model's masks laid out like its parameters;
  whole weights gathered on rank 0; metrics averaged over ranks;
- ``source``: each rank's rows of the global batch, weighted so the averaged gradient is the global one;
- ``checkpoint``: sharded, resumable checkpoints (torch.distributed.checkpoint);
- ``run``: a RunConfig trained by a torchrun job into the run cache; ``python -m opsft.distributed``.
"""
