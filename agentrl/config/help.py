"""One help text per config key, shown by ``agentrl train CFG --print-config`` (``agentrl.config.docs``).

Keyed by the dotted key. A nested section that may be null (``policy.lora``, ``rollout.harness``)
has a line of its own, shown while it is null. The section docstrings (``agentrl.config.sections``
and the modules it imports) say how the keys work together; these say what each key is.
``tests/config`` checks that every key of ``Config`` has one. Layer L0: no imports.
"""

from __future__ import annotations

__all__ = ["KEY_HELP"]

KEY_HELP: dict[str, str] = {
    # env
    "env.id": "registered env id (agentrl envs list), checked when the config is loaded",
    "env.kwargs": "keyword arguments of the env's constructor (e.g. data_dir, n_tasks)",
    "env.split": "task split the training episodes are drawn from",
    "env.max_turns": "turns before an episode is cut (its last turn truncated)",
    "env.max_observation_chars": "longest observation an env may answer, characters (longer: the episode is "
                                 "env_error, cause observation_too_large)",
    "env.eval_split": "task split of the held-out evaluation panel",
    "env.eval_panel_size": "tasks in the evaluation panel (0 = no evaluation)",
    # run
    "run.name": "run folder name under run.out_dir (checkpoints, metrics, turn store)",
    "run.seed": "seed of the run: the rollouts' task seeds, torch's and NumPy's seeds, the minibatch order",
    "run.out_dir": "folder that holds the run folders (created if missing)",
    "run.iterations": "training iterations: one rollout phase + one update phase each",
    "run.eval_every": "evaluate the panel every N iterations (0 = never)",
    "run.save_every": "save a checkpoint every N iterations (0 = never)",
    "run.eval_seed": "seed of sampled evaluation (recorded with every eval result)",
    "run.eval_before": "also evaluate the panel before the first iteration, so the run reports before → after",
    # policy
    "policy.model": "packaged model name (agentrl models list) or a Hugging Face model folder",
    "policy.engine": "what samples the rollouts: hf (in process), vllm, vllm_http, openai_http or scripted",
    "policy.dtype": "weights' dtype: float32 (the engines' default) or bfloat16 / float16 (~2-3x faster on "
                    "AVX-512-BF16 CPUs and on GPUs)",
    "policy.temperature": "sampling temperature of the rollouts (> 0; greedy evaluation is separate)",
    "policy.top_p": "nucleus sampling mass in (0, 1]",
    "policy.max_tokens": "tokens the policy may generate per turn",
    "policy.context": "prompt of each turn: chat (the whole conversation, append-only) or window (a fresh "
                      "prompt with the last window_k turns)",
    "policy.window_k": "past turns a window prompt shows (context: window)",
    "policy.action_format": "how the action is read from a completion: tag:NAME, regex:PATTERN, whole or hiper",
    "policy.action_constraint": "admissible: decode only the env's admissible actions (a token trie); none: free text",
    "policy.system_prompt": "system message template: {env_instructions} (the env's reset info['instructions'], "
                            "else a generic text-game sentence) and {action_format} (the format's sentence)",
    "policy.base_url": "server URL of the HTTP engines (vllm_http, openai_http), e.g. http://localhost:8000/v1",
    "policy.max_batch": "most prompts per engine call (null = every active slot)",
    "policy.return_hidden": "store final-layer hidden states with the turns (needed by BiPACE)",
    "policy.lora": "LoRA adapters (peft); null = full fine-tuning",
    "policy.lora.rank": "LoRA rank r",
    "policy.lora.alpha": "LoRA scaling, peft's lora_alpha",
    "policy.lora.dropout": "dropout on the adapters' input, in [0, 1)",
    "policy.lora.target_modules": "names of the modules that get adapters",
    "policy.lora.top_n_layers": "adapters only on the last n transformer layers (null = every layer)",
    "policy.window_history": "window context: full (each kept action with the observation it produced) or "
                             "actions (the actions only; ~40 % shorter prompts)",
    "policy.num_threads": "torch intra-op threads of the in-process model (0 = OMP_NUM_THREADS when set, "
                          "else all cores)",
    "policy.device": "where the model, the critic and the training batches live: auto, cpu, cuda or cuda:N",
    "policy.prefix_cache_mb": "MiB of the HF engine's prefix KV cache (shared system/task text computed "
                              "once; 0 = off; speed only)",
    "policy.decode_attention": "HF engine's float32 decode attention: grouped (no cache copies on padded "
                               "batches) or sdpa (stock); speed only",
    "policy.vllm.max_model_len": "vLLM context in tokens, prompt + completion (null = the model's own)",
    "policy.vllm.gpu_memory_utilization": "fraction (0, 1] of the GPU's memory vLLM may take (null = computed "
                                          "once the trainer's model is resident)",
    "policy.vllm.enforce_eager": "no CUDA graphs / torch.compile (null = off on CUDA, on on CPU)",
    "policy.vllm.enable_prefix_caching": "reuse the KV cache of shared prompt prefixes (reset after each "
                                         "weight push)",
    "policy.vllm.max_num_seqs": "most sequences vLLM schedules per step (null = vLLM's default)",
    "policy.vllm.enable_sleep_mode": "offload vLLM's weights and drop its KV cache during each update "
                                     "(null = on on CUDA, off on CPU)",
    "policy.vllm.weight_bucket_mb": "MiB of weights per bucket of a weight push into vLLM",
    "policy.hiper_subgoals": "hiper format under action_constraint admissible: the <subgoal> texts the "
                             "policy chooses from",
    # rollout
    "rollout.groups_per_iteration": "task instances rolled out per iteration",
    "rollout.group_size": "episodes per task instance (one comparison group)",
    "rollout.num_workers": "env worker processes",
    "rollout.step_timeout_s": "seconds an env step may take before the episode fails (env_error)",
    "rollout.harness": "external agent program that plays the episodes through the recording proxy "
                       "(null = the agent loop)",
    "rollout.harness.command": "the harness's argv ({python} = this interpreter)",
    "rollout.harness.timeout_s": "per-episode deadline of the harness in seconds",
    "rollout.harness.max_parallel": "harness processes run at once",
    "rollout.harness.mode": "the proxy's prompt continuation: tito, retokenize or strict",
    "rollout.sampler": "chain (independent episodes), tree (Tree-GRPO) or rtpo (reverse trees)",
    "rollout.tree.trees": "Tree-GRPO: trees per task (they replace group_size)",
    "rollout.tree.rounds": "Tree-GRPO: expansion rounds",
    "rollout.tree.branches": "Tree-GRPO: new branches per tree per round",
    "rollout.tree.leaves": "Tree-GRPO: leaves kept per tree after pruning (null = all)",
    "rollout.tree.stride": "RTPO: turns between branch points, from the end of each base trajectory",
    "rollout.tree.siblings": "RTPO: continuations per branch point, the base's own included (>= 2)",
    "rollout.tree.branch_points": "RTPO: most branch points per base trajectory",
    "rollout.backend": "env workers as local processes (local) or Ray actors (ray)",
    "rollout.engines": "engine workers that roll out apart from the trainer (0 = sample in the trainer's process)",
    "rollout.engine_devices": "local engine workers: one device each, e.g. [cuda:1, cuda:2] (null = policy.device)",
    "rollout.engine_gpus": "Ray engine actors: GPUs each one reserves (0 = CPU actors)",
    "rollout.placement.engine_resources": "custom Ray resources each engine actor reserves, e.g. {engine_node: 1} "
                                          "({} = any node)",
    "rollout.placement.trainer_resources": "custom Ray resources each --ray-ranks trainer rank reserves",
    "rollout.placement.engine_cpus": "Ray CPUs each engine actor reserves (fractions allowed)",
    "rollout.placement.strategy": "placement group strategy of the engine actors: PACK, SPREAD, STRICT_PACK "
                                  "or STRICT_SPREAD",
    "rollout.placement.separate_nodes": "refuse to start when an engine actor lands on the trainer's node",
    "rollout.placement.broadcast_host": "address the engine actors reach the trainer's weight store at "
                                        "(null = the node IP Ray reports)",
    "rollout.placement.broadcast_ports": "[first, last] ports the weight store may listen on (null = any free port)",
    "rollout.max_staleness": "policy versions the engine workers may run ahead of the trainer (0 = synchronous)",
    "rollout.on_weight_update": "max_staleness >= 1: episodes in flight continue on the new weights or "
                                "drain on their old ones",
    "rollout.turn_seeds": "sample every (episode, turn) from its own seed in the trainer's process too",
    "rollout.sync_probe": "check each weight sync with a probe's logprobs: auto, always or never",
    "rollout.sync_probe_tol": "largest probe logprob gap allowed, in nats (null = 1e-3 in float32, 0.5 in "
                              "bf16/fp16)",
    "rollout.sync_timeout_s": "seconds a weight sync may take before the run stops",
    "rollout.weight_transport": "weights to engine workers: auto (shared memory for local workers, the "
                                "broadcast group for Ray actors), shared_memory or broadcast",
    "rollout.harness.tool_schemas": "tool name -> JSON schema the proxy decodes that tool's forced calls under "
                                    "(null = the harness's own)",
    "rollout.harness.force_tool_call": "every call that offers tools must call one (the proxy forces it)",
    "rollout.harness.only_tools": "a forced tool call may call only these of the offered tools, e.g. [act]",
    "rollout.harness.resends": "an exact resend of the last call: retry (supersedes it) or new_call (its own turn)",
    "rollout.min_group_valid": "ok episodes a group that lost one (failed, never trained on) needs to stay in "
                               "the update",
    # algorithm
    "algorithm.estimator": "credit estimator, a registered name (grpo, gigpo, turn_ppo, ...)",
    "algorithm.kwargs": "the estimator's keyword hyperparameters (each listed with its default in effect)",
    "algorithm.scorers": "options of the step scorers the estimator declares, per scorer (prm: {prm_lr: 0}; "
                         "hindsight: {teacher_refresh: 10}), defaults in effect",
    "algorithm.schedule": "linear schedules of algorithm.kwargs: {name: {to: value, iterations: n}} "
                          "(e.g. {lambda_mix: {to: 0.0, iterations: 50}})",
    "algorithm.group_by_version": "compute group statistics per policy version (asynchronous runs)",
    # reward
    "reward.judge": "score each ok episode with a judge model (null = off); agentrl.rollout.judge",
    "reward.judge.endpoint": "policy (the policy's engine), local:<model> (a second engine) or an OpenAI-compatible "
                             "http(s) base URL",
    "reward.judge.model": "model name sent to an http endpoint",
    "reward.judge.api_key_env": "environment variable holding the http endpoint's API key (null = none)",
    "reward.judge.rubric": "prompt template with {task}, {transcript} and {env_id} (null = a generic pass/fail rubric)",
    "reward.judge.verdict": "pass_fail ({verdict: pass|fail} -> 1|0) or scale ({score: 0..scale_max} -> score/scale_max)",
    "reward.judge.scale_max": "top of the scale verdict",
    "reward.judge.mode": "replace the env's reward with the judge's score x weight, or add it",
    "reward.judge.weight": "factor on the judge's score",
    "reward.judge.concurrency": "judge calls at once",
    "reward.judge.timeout_s": "seconds per judge call",
    "reward.judge.retries": "further attempts after an error or an unreadable verdict",
    "reward.judge.max_tokens": "most tokens per verdict",
    "reward.judge.observation_chars": "each observation in the transcript cut to this many characters",
    # update
    "update.loss": "registered policy loss: ppo_clip or gspo",
    "update.clip_low": "ratio clip below: 1 − clip_low, in [0, 1)",
    "update.clip_high": "ratio clip above: 1 + clip_high (DAPO's clip-higher when > clip_low)",
    "update.clip_c": "dual-clip constant (> 1; null = off)",
    "update.epochs": "passes over each iteration's batch",
    "update.minibatch": "rows per optimizer step (0 = the whole batch)",
    "update.micro_batch": "rows per forward pass (gradients accumulate in between)",
    "update.micro_batch_tokens": "N > 0: rows packed without padding, <= N tokens per pass (0 = padded rows)",
    "update.lr": "policy learning rate (AdamW)",
    "update.weight_decay": "AdamW weight decay (the critic's too)",
    "update.grad_clip": "gradient norm clip (0 = off)",
    "update.kl_coef": "weight of the KL penalty to a frozen reference model; the trainer loads none yet, so it must be 0",
    "update.kl_estimator": "KL estimator of the penalty: k1, k2 or k3",
    "update.entropy_coef": "weight of the entropy bonus (0 = off)",
    "update.aggregation": "how token losses are averaged, so how much a turn and an episode weigh: "
                          "token-mean, seq-mean-token-mean, seq-mean-token-sum-norm or episode-mean-token-mean",
    "update.sum_norm_tokens": "seq-mean-token-sum-norm's divisor (null = policy.max_tokens)",
    "update.pack": "pack prefix-consistent turns of one episode into one sequence",
    "update.share_prefix": "run the prompt prefix a micro-batch's rows share once (same gradients; window prompts)",
    "update.gradient_checkpointing": "recompute activations in the backward pass (less memory, slower)",
    "update.critic_lr": "turn-PPO critic's learning rate",
    "update.critic_minibatch": "turn-PPO critic: distinct prompts per optimizer step (0 = one step per pass)",
    "update.critic_top_n_layers": "turn-PPO critic: only the top n layers train (null = all of them)",
    "update.value_clip": "turn-PPO critic's value clip (null = off)",
    "update.rollout_correction": "off-policy correction of sampler/trainer mismatch: auto, none, tis, mis or icepop",
    "update.sampler_kl_every": "with rollout_correction none: probe the sampler-trainer KL every k-th update (0 = never)",
    "update.correction_level": "correction ratio per token or per turn (sequence)",
    "update.correction_high": "tis/mis/icepop cap C of the correction ratio (> 1)",
    "update.correction_low": "icepop's lower bound α of the correction ratio, in (0, 1)",
    "update.master_weights": "float32 master weights under a half-precision policy.dtype: auto, on or off",
    "update.audit": "check before every loss that each trained token carries its own turn's advantage and no other token any (stops the run with the row, episode and turn on a mismatch)",
    # log
    "log.console": "print one metrics line per iteration",
    "log.jsonl": "write metrics.jsonl in the run folder",
    "log.tensorboard": "write TensorBoard event files in the run folder",
    "log.wandb_project": "W&B project to log to (null = no W&B)",
}
