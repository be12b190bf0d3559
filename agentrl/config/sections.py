"""Config sections: one frozen dataclass per pipeline stage (``run``, ``env``, ``policy``,
``rollout``, ``algorithm``, ``update``, ``log``) with range checks in ``__post_init__``.

Loading and overrides live in ``agentrl.config.loader``, validation in ``agentrl.config.checks``
(``agentrl.config`` re-exports these classes). Layer L0: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from agentrl.config.errors import ConfigError
from agentrl.config.errors import check as _check
from agentrl.config.errors import check_min as _check_min
from agentrl.config.placement import PlacementSpec
from agentrl.config.harness import HarnessConfig  # noqa: F401  (a section of RolloutConfig, re-exported)
from agentrl.config.reward import RewardConfig  # noqa: F401  (a section of Config, re-exported)
from agentrl.config.update import UpdateConfig  # noqa: F401  (a section of Config, re-exported)
from agentrl.config.vllm import VLLMSpec


#: The accepted forms of ``policy.device`` (resolved to a torch device by ``agentrl.llm.device``).
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
#: ``policy.system_prompt``'s default and placeholders (as ``agentrl.rollout.prompt``, which renders it).
SYSTEM_PROMPT = "{env_instructions} {action_format}"
SYSTEM_PROMPT_PLACEHOLDERS = ("env_instructions", "action_format")


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class RunConfig:
    """``run``: identity and schedule. ``iterations``, ``eval_every`` and ``save_every`` count
    training iterations (one rollout phase + one update phase); 0 disables eval / saving.
    ``eval_seed``: the seed of sampled evaluation (recorded with every eval result);
    ``eval_before``: also evaluate the panel before the first iteration (a fresh run), so the
    run reports before → after on the same panel."""

    name: str = "run"
    seed: int = 0
    out_dir: str = "runs"
    iterations: int = 100
    eval_every: int = 10
    save_every: int = 10
    eval_seed: int = 0
    eval_before: bool = False

    def __post_init__(self) -> None:
        _check_min("run.iterations", self.iterations, 0)
        _check_min("run.eval_every", self.eval_every, 0, "0 = off")
        _check_min("run.save_every", self.save_every, 0, "0 = off")


@dataclass(frozen=True)
class EnvConfig:
    """``env``: which registered env (``id``, checked before any worker starts), its constructor
    ``kwargs``, the task split, the turn limit, the held-out evaluation panel and the longest
    observation an env may answer (``max_observation_chars``, characters: longer makes the
    episode env_error, cause ``observation_too_large``; = ``agentrl.env.guards.DEFAULT_MAX_OBSERVATION_CHARS``)."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    max_turns: int = 8
    eval_split: str = "eval"
    eval_panel_size: int = 40
    max_observation_chars: int = 1_000_000

    def __post_init__(self) -> None:
        _check(bool(self.id), "env.id is empty; set it to a registered id such as 'agentrl/Toy-v0'")
        _check_min("env.max_turns", self.max_turns, 1)
        _check_min("env.eval_panel_size", self.eval_panel_size, 0, "0 = no evaluation")
        _check_min("env.max_observation_chars", self.max_observation_chars, 1, "characters")


@dataclass(frozen=True)
class LoraSpec:
    """``policy.lora``: LoRA adapters (peft). ``top_n_layers`` puts adapters only on the last
    n transformer layers (None = all layers); ``alpha`` is peft's ``lora_alpha``."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    top_n_layers: Optional[int] = None

    def __post_init__(self) -> None:
        _check_min("policy.lora.rank", self.rank, 1)
        _check(0.0 <= self.dropout < 1.0, f"policy.lora.dropout must be in [0, 1), got {self.dropout!r}")
        _check(len(self.target_modules) > 0, "policy.lora.target_modules must name at least one module")
        _check_min("policy.lora.top_n_layers", self.top_n_layers, 1, null_ok=True)


@dataclass(frozen=True)
class PolicyConfig:
    """``policy``: the model (packaged name or HF folder path), the engine, sampling
    (``temperature``, ``top_p``, ``max_tokens`` generated tokens per turn), how the prompt is
    built (``context``: full ``chat`` history or a ``window`` of the last ``window_k`` turns),
    the action format (``agentrl.rollout.parsing``) and optional LoRA. ``base_url`` is the
    server of the HTTP engines; ``max_batch`` caps prompts per engine call (None = all active
    slots); ``return_hidden`` stores final-layer hidden states (needed by BiPACE);
    ``action_constraint: admissible`` decodes only the env's admissible actions (a token trie,
    logprobs renormalised over the allowed ids; ``agentrl.llm.constrained``, LEARNING.md). ``dtype`` float32
    matches the engines' default; bfloat16 is ~2-3x faster on AVX-512-BF16 CPUs (LEARNING.md).
    ``window_history`` (``window`` context only): ``full`` shows each of the last ``window_k``
    actions with the observation it produced; ``actions`` shows only the actions (prompts
    ~40 % shorter on TextWorld, and prefill dominates a CPU turn). ``num_threads``: torch
    intra-op threads of the in-process model (1 by default so tests and servers sharing the
    cores do not oversubscribe, MODELS.md §2.6; 0 = ``OMP_NUM_THREADS`` when set, else all
    cores; the examples use 0 and the main job sets ``OMP_NUM_THREADS=2``).
    ``device``: where the trained model, the in-process engine's model, the critic and every
    training batch live: ``auto`` (default; the current CUDA device when
    ``torch.cuda.is_available()``, else ``cpu``), ``cpu``, ``cuda`` (the current CUDA device,
    ``torch.cuda.current_device()``, e.g. the one a distributed launcher set per rank) or
    ``cuda:N``. Only the form is checked here (no torch at parse time); it is resolved by
    ``agentrl.llm.device.resolve_device`` when the policy is loaded, which raises a
    ``ConfigError`` naming the fix when CUDA is asked for and absent, or N is out of range.
    ``prefix_cache_mb``: memory bound (MiB) of the HF engine's prefix KV cache, which starts
    each prompt from the keys/values of its longest prefix already computed (the system/task
    text every turn and every episode of a group repeat; ``agentrl.llm.prefix_cache``);
    0 turns it off. It changes speed, not what is sampled (logits equal within float rounding).
    ``decode_attention``: ``grouped`` (default) runs the HF engine's float32 decode steps with
    ``agentrl.llm.decode_attention`` — grouped-query attention without copying the cache on
    padded batches — or ``sdpa`` (transformers' stock attention). Speed only, like
    ``prefix_cache_mb``; longer queries (prefill, the update) always run ``sdpa``.
    ``vllm``: the vLLM engine's arguments (``policy.engine: vllm``; ``agentrl.config.vllm.VLLMSpec``).
    ``hiper_subgoals``: with ``action_format: hiper`` and ``action_constraint: admissible``, the
    ``<subgoal>`` texts the policy chooses from (each turn: switch × subgoal × admissible action;
    ``agentrl.llm.constrained.rendered_completions``): HiPER's tags from a model that does not write
    them unprompted. ``system_prompt``: the system message template, ``{env_instructions}`` (the
    env's reset ``info["instructions"]``, else a generic text-game sentence) and ``{action_format}``
    (the action format's sentence) filled in at reset (``agentrl.rollout.prompt``)."""

    model: str = "smollm2-135m-instruct"
    engine: Literal["hf", "vllm", "vllm_http", "openai_http", "scripted"] = "hf"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    context: Literal["chat", "window"] = "chat"
    window_k: int = 3
    action_format: str = "tag:action"
    action_constraint: Literal["none", "admissible"] = "none"
    base_url: Optional[str] = None
    max_batch: Optional[int] = None
    return_hidden: bool = False
    lora: Optional[LoraSpec] = None
    window_history: Literal["full", "actions"] = "full"
    num_threads: int = 1
    device: str = "auto"
    prefix_cache_mb: int = 1024
    decode_attention: Literal["grouped", "sdpa"] = "grouped"
    vllm: VLLMSpec = field(default_factory=VLLMSpec)
    hiper_subgoals: tuple[str, ...] = ()
    system_prompt: str = SYSTEM_PROMPT

    def __post_init__(self) -> None:
        unknown = [p for p in re.findall(r"\{([A-Za-z_]\w*)\}", self.system_prompt) if p not in SYSTEM_PROMPT_PLACEHOLDERS]
        _check(not unknown, f"policy.system_prompt: unknown placeholder {{{unknown[0] if unknown else ''}}}; the allowed "
               f"placeholders are {', '.join('{' + p + '}' for p in SYSTEM_PROMPT_PLACEHOLDERS)} (other braces are "
               "kept as written)")
        _check(isinstance(self.device, str) and DEVICE_PATTERN.fullmatch(self.device) is not None,
               f"policy.device={self.device!r} is not a device; use auto, cpu, cuda or cuda:N (N = 0, 1, ...)")
        _check_min("policy.num_threads", self.num_threads, 0, "0 = OMP_NUM_THREADS when set, else all cores")
        _check_min("policy.prefix_cache_mb", self.prefix_cache_mb, 0, "MiB of cached prompt keys/values; 0 = off")
        _check_min("policy.temperature", self.temperature, 0, "sampling; greedy eval is separate", strict=True)
        _check(0 < self.top_p <= 1, f"policy.top_p must be in (0, 1], got {self.top_p!r}")
        _check_min("policy.max_tokens", self.max_tokens, 1)
        _check_min("policy.window_k", self.window_k, 0)
        _check(self.engine not in ("vllm_http", "openai_http") or bool(self.base_url),
               f"policy.engine={self.engine} needs policy.base_url (e.g. http://localhost:8000/v1)")
        _check_min("policy.max_batch", self.max_batch, 1, "null: all active slots", null_ok=True)
        _check(self.action_constraint == "none" or self.action_format in ("whole", "hiper")
               or self.action_format.startswith("tag:"),
               "policy.action_constraint=admissible renders actions in the format: use action_format 'whole', "
               "'tag:NAME' or 'hiper'")
        _check(self.action_constraint == "none" or self.action_format != "hiper"
               or (bool(self.hiper_subgoals) and all(str(g).strip() for g in self.hiper_subgoals)),
               "policy.action_format=hiper with action_constraint=admissible needs policy.hiper_subgoals, the "
               "subgoal texts the policy chooses from, e.g. ['reach the next junction', 'take the right exit']")
        _check(not (self.device == "cpu" and self.vllm.enable_sleep_mode),
               "policy.vllm.enable_sleep_mode=true needs CUDA (vLLM's sleep mode); set it to null or false with "
               "policy.device: cpu")


@dataclass(frozen=True)
class TreeConfig:
    """``rollout.tree``: tree-structured sampling (``agentrl.rollout.tree`` / ``reverse``).

    Tree-GRPO (``rollout.sampler: tree``, ALGORITHMS.md §7.1, arXiv 2509.21240): ``trees`` (M)
    trees per task, ``rounds`` (L) expansion rounds, ``branches`` (N) new branches per tree per
    round from nodes drawn uniformly with replacement among the root and non-leaf nodes,
    ``leaves`` (K) leaves kept per tree after pruning (null = keep all).
    RTPO (``rollout.sampler: rtpo``, §9.2): branch points every ``stride`` (s) turns from the
    end of each base trajectory, at most ``branch_points`` (B) of them, ``siblings`` (K)
    continuations per branch point including the base's own."""

    trees: int = 4
    rounds: int = 1
    branches: int = 2
    leaves: Optional[int] = None
    stride: int = 1
    siblings: int = 4
    branch_points: int = 2

    def __post_init__(self) -> None:
        _check_min("rollout.tree.trees", self.trees, 1)
        _check_min("rollout.tree.branches", self.branches, 1)
        _check_min("rollout.tree.rounds", self.rounds, 0)
        _check_min("rollout.tree.leaves", self.leaves, 1, "null: keep all", null_ok=True)
        _check_min("rollout.tree.stride", self.stride, 1)
        _check_min("rollout.tree.branch_points", self.branch_points, 1)
        _check_min("rollout.tree.siblings", self.siblings, 2, "the base continuation plus at least one new one")


def _check_engine_devices(r) -> None:
    """``rollout.engine_devices`` / ``engine_gpus`` against ``engines`` and ``backend``."""
    devices = r.engine_devices
    if devices is not None:
        _check(r.backend == "local", "rollout.engine_devices places local engine workers; with rollout.backend: "
               "ray set rollout.engine_gpus (GPUs per engine actor) instead")
        _check(len(devices) == r.engines, f"rollout.engine_devices has {len(devices)} entries for "
               f"rollout.engines={r.engines}; give one device per engine worker (e.g. [cuda:1, cuda:2])")
        for d in devices:
            ok = d == "cpu" or (str(d).startswith("cuda:") and str(d)[5:].isdigit())
            _check(ok, f"rollout.engine_devices entry {d!r} is not cpu or cuda:N (N counted in the "
                   "trainer's CUDA_VISIBLE_DEVICES)")
    _check_min("rollout.engine_gpus", r.engine_gpus, 0, "GPUs per Ray engine actor")
    _check(r.engine_gpus == 0 or r.backend == "ray", "rollout.engine_gpus reserves GPUs for Ray engine actors; "
           "with rollout.backend: local give rollout.engine_devices (one device per worker) instead")


@dataclass(frozen=True)
class RolloutConfig:
    """``rollout``: ``groups_per_iteration`` task instances × ``group_size`` episodes each,
    ``num_workers`` env worker processes, ``step_timeout_s`` seconds per env step; ``harness``
    (optional) plays the episodes with an external agent program instead of the agent loop.
    ``sampler``: ``chain`` (independent episodes), ``tree`` (Tree-GRPO trees: ``tree.trees``
    per task replace ``group_size``) or ``rtpo`` (``group_size`` base trajectories per task,
    each with a sparse reverse tree, updated in reverse-turn rounds); see ``TreeConfig``.
    ``backend``: ``local`` env worker processes (``EnvPool``) or ``ray`` actors (``RayEnvPool``,
    same API; needs the ``ray`` extra).
    ``engines``: 0 (default) samples in the trainer's process from the trained model itself;
    K ≥ 1 plays the rollouts on K engine workers apart from the trainer (``backend`` local:
    processes, ray: actors), each with its own HF engine and env-pool shard, whole groups per
    worker, every (episode, turn) sampled from its own seed (the same episodes for any K);
    the trainer pushes versioned weights to them after every update
    (``agentrl.rollout.engines.interface``). Chains only (no tree / rtpo sampler, no harness).
    ``policy.engine`` (``hf`` | ``vllm``) is the workers' engine too. ``engine_devices`` (local
    workers): one device per worker (``[cuda:1, cuda:2]``: worker k's process sees only that GPU,
    ``CUDA_VISIBLE_DEVICES`` set before CUDA starts, and uses it as ``cuda:0``; ``cpu`` entries
    stay on the CPU); null = every worker on ``policy.device``. ``engine_gpus`` (Ray engine
    actors): GPUs each actor reserves in a placement group (Ray then shows it only those; its
    engine uses ``cuda``); 0 = CPU actors.
    ``max_staleness``: 0 (default) is the synchronous loop; S ≥ 1 (needs ``engines`` ≥ 1) lets the engine workers run up to S policy versions ahead of the
    trainer: an iteration trains only groups whose every turn was sampled within S versions
    of the trainer's, older ones are dropped and counted (``agentrl.rollout.engines.stream``).
    ``on_weight_update`` (S ≥ 1): ``continue`` — episodes in flight go on under the new
    weights from their next turn; ``drain`` — they finish on their old weights first.
    ``turn_seeds``: sample every (episode, turn) from its own seed in the trainer's process
    too (engine workers and data-parallel ranks always do), so a 1-process run stores the same
    episodes as any sharding of it over ranks or workers; off by default (one seed per batch,
    today's episodes). Under torchrun every rank rolls out its share of the groups with its
    own engine (``agentrl.distributed.policy``).
    Weight sync checks (``agentrl.train.sync``): ``sync_probe`` ``auto`` (default) scores a
    fixed probe (prompt + completion) on every engine that does not sample from the trained
    model itself (vLLM, the ranks' engine copies, engine workers) after each sync and compares
    it with the trainer's logprobs: a gap above ``sync_probe_tol`` (None: 1e-3 in float32,
    0.5 in bf16/fp16), or an engine whose probe did not move at all while the trainer's moved by
    more than a tenth of that, stops the run with one line naming the engine, the version and
    the gap; ``always`` probes even an engine that shares the trained model (a cost
    measurement); ``never`` skips it (not on/off: YAML reads those as booleans).
    ``sync_timeout_s``: seconds a weight sync may take before the run stops with one line.
    ``weight_transport``: how weights reach engine workers — ``shared_memory`` (buffers every
    local worker maps; no socket), ``broadcast`` (a torch.distributed group, bound and keyed per
    run: ``agentrl.llm.weight_store``), ``auto`` (default: shared memory for local workers, the
    group for Ray actors, which may sit on other hosts).
    ``min_group_valid`` (default 2): a group that lost an episode (status not ok: it is never
    trained on) stays in the update only with at least this many ok episodes; otherwise it is
    dropped and counted (``rollout/groups_dropped``; ``agentrl.train.exclusion``)."""

    groups_per_iteration: int = 6
    group_size: int = 4
    num_workers: int = 1
    step_timeout_s: float = 60.0
    harness: Optional[HarnessConfig] = None
    sampler: Literal["chain", "tree", "rtpo"] = "chain"
    tree: TreeConfig = field(default_factory=TreeConfig)
    backend: Literal["local", "ray"] = "local"
    engines: int = 0
    engine_devices: Optional[tuple[str, ...]] = None
    engine_gpus: float = 0.0
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    max_staleness: int = 0
    on_weight_update: Literal["continue", "drain"] = "continue"
    turn_seeds: bool = False
    sync_probe: Literal["auto", "always", "never"] = "auto"
    sync_probe_tol: Optional[float] = None
    sync_timeout_s: float = 600.0
    weight_transport: Literal["auto", "broadcast", "shared_memory"] = "auto"
    min_group_valid: int = 2

    def __post_init__(self) -> None:
        _check_min("rollout.engines", self.engines, 0, "0 = sample in the trainer's process")
        _check_min("rollout.min_group_valid", self.min_group_valid, 1, "ok episodes a group that lost one needs")
        _check_min("rollout.sync_probe_tol", self.sync_probe_tol, 0, "max |logprob gap| in nats; null: the dtype's "
                   "default", strict=True, null_ok=True)
        _check_min("rollout.sync_timeout_s", self.sync_timeout_s, 0, "seconds", strict=True)
        _check_min("rollout.max_staleness", self.max_staleness, 0, "0 = synchronous rollouts")
        _check(self.max_staleness == 0 or self.engines >= 1,
               f"rollout.max_staleness={self.max_staleness} needs engine workers apart from the trainer: set "
               "rollout.engines >= 1 (or max_staleness: 0 for synchronous rollouts)")
        _check_engine_devices(self)
        _check(self.weight_transport != "shared_memory" or self.backend == "local",
               "rollout.weight_transport: shared_memory reaches local engine workers only; Ray engine actors "
               "(rollout.backend: ray) take the broadcast group: set weight_transport to auto or broadcast")
        engine_keys = self.placement.engine_keys_set()
        _check(not engine_keys or (self.backend == "ray" and self.engines >= 1),
               f"rollout.placement.{', '.join(engine_keys)} act only on Ray engine actors; set rollout.backend: ray and "
               "rollout.engines >= 1, or remove them")
        _check(self.engines == 0 or (self.sampler == "chain" and self.harness is None),
               f"rollout.engines={self.engines} runs chain rollouts only; set rollout.sampler: chain without "
               "rollout.harness, or rollout.engines: 0 for trees, RTPO and external harnesses")
        _check(self.sampler == "chain" or self.harness is None, "rollout.sampler tree/rtpo needs the agent loop; "
               "remove rollout.harness or set rollout.sampler: chain")
        _check_min("rollout.groups_per_iteration", self.groups_per_iteration, 1)
        _check_min("rollout.group_size", self.group_size, 1)
        _check_min("rollout.num_workers", self.num_workers, 1)
        _check_min("rollout.step_timeout_s", self.step_timeout_s, 0, "seconds", strict=True)


@dataclass(frozen=True)
class AlgorithmConfig:
    """``algorithm``: the credit estimator (``agentrl.credit`` registry name) and its keyword
    hyperparameters, validated against the estimator's signature; after validation ``kwargs``
    holds every keyword in effect, defaults included (PITFALLS P4). ``group_by_version``: true
    computes every group statistic per policy version (comparison groups split by the version
    that started each episode, so an asynchronous run's baseline never mixes versions;
    ``agentrl.credit.versions``; estimators whose groups are task groups, not tree_grpo, rtpo or
    turn_ppo).

    ``scorers``: options of the step scorers the estimator declares, one mapping per scorer name
    (OPRL's ``prm``: ``{prm_lr: 0}``; StepOPSD's ``hindsight``: ``{teacher_refresh: 10}``), checked
    against the options each scorer registered, every default filled in
    (``agentrl.train.scorers``). ``schedule``: per-hyperparameter schedules of ``kwargs``, e.g.
    ``{lambda_mix: {to: 0.0, iterations: 50}}``: linear from the ``kwargs`` value at iteration 0
    to ``to`` at ``iterations``, constant after (``agentrl.config.schedule``); the trainer and the
    scorers read the value in effect, never the estimator's name."""

    estimator: str = "grpo"
    kwargs: dict[str, Any] = field(default_factory=dict)
    group_by_version: bool = False
    scorers: dict[str, Any] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogConfig:
    """``log``: metrics sinks (``agentrl.log``): rich console line, ``metrics.jsonl`` in the
    run dir, TensorBoard event files, W&B (only when ``wandb_project`` is set)."""

    console: bool = True
    jsonl: bool = True
    tensorboard: bool = False
    wandb_project: Optional[str] = None


@dataclass(frozen=True)
class Config:
    """The whole run: one section per pipeline stage. Build with ``load_config``."""

    env: EnvConfig
    run: RunConfig = field(default_factory=RunConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    log: LogConfig = field(default_factory=LogConfig)
