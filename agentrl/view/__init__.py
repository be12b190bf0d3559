"""agentrl.view — ``agentrl view STORE``: a local web replay viewer of a turn store (just below L5 cli).

Owns: read-only per-request connections and the viewer's indexes (``db``), run/group/episode
queries (``queries``), turn queries (``turns``), branch trees (``tree``), SVG charts
(``charts``), token decoding and colours (``tokens``), advantage breakdowns shown per turn
(``explain``: the estimator's own, run on the group's stored rows), text search (``search``),
page models (``pages``, ``group_pages``), the FastAPI app (``app``) and its Jinja2 templates
(``templates/``, package data).
May import: ``agentrl.store``, ``agentrl.credit`` (breakdowns), ``agentrl.llm.models`` (to find a
run's tokenizer), ``agentrl.types``, ``agentrl.registry``; FastAPI / Jinja2 / uvicorn / tokenizers lazily. Never writes a turn,
episode, advantage or metric; never imports torch.
"""

from agentrl.view.app import ViewerOptions, create_app

__all__ = ["ViewerOptions", "create_app"]
