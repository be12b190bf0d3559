"""agentrl.distributed — data-parallel training across processes (layer L3½: above
``agentrl.update``, below ``agentrl.train``; imports torch and torch.distributed). It was
``agentrl.dist``: a folder named ``dist`` reads as build output to packaging and repository tools.

Owns: the process group of a run (``DistContext``: torchrun's environment, or a 1-rank group;
gloo on CPU, NCCL on GPU), FSDP2 wrapping of a causal LM (``parallelize``: ``fully_shard``
per decoder layer, then the root — torchtitan's pattern), the gather of the trained weights
into the plain HF names an inference engine loads (``inference_state``, LoRA merged out of
place), and the broadcast of an iteration's update plan from rank 0 (``broadcast_object``).

The global loss normalisation of the data-parallel step (every aggregation mode divides by
counts all-reduced over the ranks) lives in ``agentrl.update.step`` (``update(..., dp=ctx)``),
and the distributed checkpoints (``torch.distributed.checkpoint``, resumable with another
world size) in ``agentrl.update.checkpoint``; both take a ``DistContext`` as their ``dp``.

Also: the policy of a data-parallel run (``distribute_policy``: sharded trainer on every rank,
an unsharded engine copy on rank 0 that samples and evaluates; ``trained_policy``: that, LoRA
and float32 master weights for the loop, in one process too).

May import: torch, agentrl.update, agentrl.llm, agentrl L0. Never imports rollout, store or credit.
"""

from agentrl.distributed.context import DistContext, launched_rank, leave_rank
from agentrl.distributed.parallel import decoder_layers, parallelize
from agentrl.distributed.policy import distribute_policy, engine_copy, trained_policy
from agentrl.distributed.weights import inference_state, iter_inference_weights

__all__ = ["DistContext", "launched_rank", "leave_rank", "decoder_layers", "parallelize", "distribute_policy",
           "engine_copy", "trained_policy", "inference_state", "iter_inference_weights"]
