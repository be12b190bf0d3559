"""vLLM worker extension: bucketed in-place weight loading (``VLLMEngine.update_weights``).

``WeightSyncExtension`` is mixed into vLLM's worker class when the engine is built with
``worker_extension_cls=FQCN`` (``VLLMEngine.from_pretrained`` does); its methods are called
by name through ``LLM.collective_rpc`` (see ``agentrl.llm.vllm_weights`` for the session and
why it must go through vLLM's layer-wise reload on CPU). Method names carry an ``agentrl_``
prefix: vLLM refuses an extension whose attributes clash with the worker's.

This module runs inside the worker and imports vLLM lazily; only ``agentrl.llm.vllm`` names
it (by FQCN string).
"""

from __future__ import annotations

#: Fully-qualified class name passed to ``vllm.LLM(worker_extension_cls=...)``.
FQCN = "agentrl.llm.vllm_worker.WeightSyncExtension"


class WeightSyncExtension:
    """Worker mix-in: ``agentrl_begin_weights`` → ``agentrl_load_weights`` × N →
    ``agentrl_finish_weights``. Uses the worker's ``model_runner`` and ``vllm_config``."""

    def _agentrl_model(self):
        return self.model_runner.get_model()

    def agentrl_begin_weights(self) -> None:
        """Start a session: vLLM's ``initialize_layerwise_reload`` on the model (each layer's
        checkpoint-shaped parameters restored on the meta device, loaders wrapped to buffer)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self._agentrl_model())

    def agentrl_load_weights(self, bucket) -> int:
        """Load one bucket with the model's own ``load_weights`` (HF checkpoint names; a layer
        is processed once all its weights arrived, possibly over several buckets).

        Args:
            bucket: ``(name, tensor)`` pairs, or a ``vllm_weights.pack_bucket`` dict.
        Returns:
            the number of tensors received.
        """
        from vllm.config import set_current_vllm_config

        from agentrl.llm.vllm_weights import unpack_bucket

        pairs = unpack_bucket(bucket) if isinstance(bucket, dict) else list(bucket)
        with set_current_vllm_config(self.vllm_config):
            self._agentrl_model().load_weights(iter(pairs))
        return len(pairs)

    def agentrl_finish_weights(self) -> None:
        """End the session: ``finalize_layerwise_reload`` (layers that received nothing keep
        their kernel tensors; attention layers are processed last), then the LoRA, encoder and
        multimodal caches are dropped as vLLM's own ``reload_weights`` does."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(self._agentrl_model(), self.vllm_config.model_config)
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            fn = getattr(self.model_runner, reset, None)
            if fn is not None:
                fn()
