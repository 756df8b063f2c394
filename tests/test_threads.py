"""The thread pin of cached computations sets the count inside its block and restores the caller's after."""

import pytest
import torch

from opsft.threads import pinned_threads


def test_pinned_threads_sets_then_restores_even_on_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), pinned_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside the block")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
