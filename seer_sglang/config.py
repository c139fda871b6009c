"""Every Seer setting, declared once: its flag, default, choices and environment variable.

The config is a tree of frozen dataclasses. ``launch_server`` builds its command line from the
field metadata (``seer_parser``), turns the parsed flags into a ``SeerConfig`` and hands it to the
launcher and the frontend. Inside an SGLang instance the plugin reads its part
(``PluginConfig``) from the environment the launcher set with ``PluginConfig.to_env``. Pure code
(policies, budget, drafters) takes its defaults from the module-level instances below
(``SCHEDULER``, ``DRAFT``, ...), so a default is written in this file and nowhere else.

This module imports nothing from the rest of the package: every process can read it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

# Choice lists. The registries that implement them (core.policy.POLICIES, speculative.drafters,
# speculative.budget.make_budget) are checked against these by the unit tests.
SCHEDULERS = ("group", "round-robin", "sample-round-robin", "sample-power-of-two", "sample-cache-aware", "divided",
              "context", "oracle", "group-oracle", "late-oracle")
KV_POOLS = ("auto", "none", "file", "mooncake")
DRAFTERS = ("suffix", "group-suffix", "sam")
DRAFT_MODES = ("none", *DRAFTERS)
BUDGETS = ("adaptive", "threshold", "full")
VERIFY_LAYOUTS = ("auto", "ragged", "bucketed", "full")

CPU_INSTANCES = 2  # instances started on a machine without a GPU (two CPU instances share its cores)
LOOPBACK = "127.0.0.1"  # every server seer starts binds here unless told otherwise
CACHE_ENV = "SEER_SGLANG_CACHE"  # root of models, logs and the native build cache
# The fewest uncached prompt tokens a sibling shares with a member of the same prefill batch for the
# instance to leave it for the next batch (plugin.queue_order; the simulator follows it): fewer are not
# worth a batch's wait.
MIN_SHARED_PREFILL = 32


def cache_root() -> Path:
    """``$SEER_SGLANG_CACHE``, or ``~/.cache/seer_sglang``."""
    return Path(os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "seer_sglang"))


def flag(default: Any, name: str, help: str, *, choices: tuple | None = None, nargs: str | None = None,
         action: str | None = None) -> Any:
    """A config field that is also a command-line flag."""
    meta = {"flag": name, "help": help, "choices": choices, "nargs": nargs, "action": action}
    return field(default=default, metadata=meta)


def env_only(default: Any, env: str, help: str) -> Any:
    """A setting that reaches the SGLang instances through the environment only (no flag)."""
    return field(default=default, metadata={"env": env, "help": help})


@dataclass(frozen=True)
class FrontendConfig:
    model_path: Optional[str] = flag(None, "--model-path", "model folder, or a built-in name (smollm2, tiny); "
                                     "default: the embedded SmolLM2-135M-Instruct")
    host: str = flag(LOOPBACK, "--host", "frontend bind address (default: loopback only)")
    port: int = flag(30000, "--port", "frontend port (default: %(default)s)")
    log_level: str = flag("info", "--log-level", "frontend log level (default: %(default)s)")
    # SGLang's --api-key and --admin-api-key, read from the SGLang flags (which pass them to every
    # instance): the frontend checks them as SGLang does, and sends them to the instances.
    api_key: Optional[str] = None
    admin_api_key: Optional[str] = None
    group_window_ms: float = flag(100.0, "--group-window-ms", "POST /generate with seer_group_size: a named "
                                  "group waits for its samples at most this long after the latest came (at most "
                                  "5 windows after the first); unnamed requests are dispatched at once and join "
                                  "the running group of their prompt and settings (default: %(default)s)")
    # What one request, and all of them together, may cost: refused up front with a clear error, never
    # by running out of memory.
    max_body_mb: float = flag(64.0, "--max-body-mb", "largest request body accepted; a larger one gets 413 "
                              "(default: %(default)s)")
    max_request_samples: int = flag(16384, "--max-request-samples", "most samples (prompts x n) one request "
                                    "may ask for; more gets 400 (default: %(default)s)")
    max_samples_in_flight: int = flag(65536, "--max-samples-in-flight", "most samples the server holds at once; "
                                      "a request that would pass it gets 429 and may retry later "
                                      "(default: %(default)s)")


@dataclass(frozen=True)
class InstancesConfig:
    num_instances: Optional[int] = flag(None, "--num-instances",
                                        f"SGLang instances to start (default: one per GPU, or {CPU_INSTANCES} on CPU; "
                                        "0: none, the engines register with POST /workers, as slime's do)")
    instance_urls: Optional[tuple] = flag(None, "--instance-urls", "attach to these running SGLang instances "
                                          "instead of starting any", nargs="+")
    instance_host: str = flag(LOOPBACK, "--instance-host", "bind address of started instances; on loopback the "
                              "ports they would bind to every interface (SGLang's process-group store, Mooncake's "
                              "store clients) stay on loopback too")
    log_dir: Optional[str] = flag(None, "--log-dir",
                                  "where instance logs go (default: ~/.cache/seer_sglang/logs/...)")
    startup_timeout: float = flag(900.0, "--startup-timeout", "seconds to wait for instances to be healthy")
    no_plugin: bool = flag(False, "--no-plugin", "start plain SGLang instances (without the seer plugin)",
                           action="store_true")
    max_restarts: int = flag(3, "--max-instance-restarts", "an instance that exits is started again on its "
                             "port, after a backoff that doubles from 2 s; after this many restarts within 10 "
                             "minutes it stays down and /health says so; 0 = never restart (default: %(default)s)")
    restart_window_s: float = 600.0
    restart_backoff_s: float = 2.0
    cpu_instances: int = CPU_INSTANCES
    # CPU only: SGLang's KV pool otherwise takes ~72% of free RAM and 20 s to allocate.
    cpu_max_total_tokens: int = 16384


@dataclass(frozen=True)
class SchedulerConfig:
    name: str = flag("context", "--scheduler", "rollout policy: group = whole groups unchunked to the "
                     "least-loaded instance, round-robin = whole groups in turn (veRL's dispatch), "
                     "sample-round-robin / sample-power-of-two / sample-cache-aware = every sample whole, placed "
                     "as a load balancer places one request per sample (sglang-router's policies), divided = "
                     "chunks to the least-loaded instance, context = divided + Seer's length context (default), "
                     "oracle = benchmarks only (reads each sample's true length), group-oracle = benchmarks only (reads "
                     "each group's true longest length), late-oracle = benchmarks only (context, with each group's "
                     "true longest length from its first finished sample)", choices=SCHEDULERS)
    chunk_size: Optional[int] = flag(None, "--chunk-size", "max new tokens per dispatch (default: an eighth of "
                                     "each sample's max_new_tokens, at least 512: a chunk long enough that its "
                                     "boundary costs little, short enough that the worst case reserved for it "
                                     "stays near what it writes)")
    kv_headroom: float = flag(1.2, "--kv-headroom", "the in-flight chunks' worst cases (context + whole chunk) "
                              "may claim this share of an instance's KV; above 1 since most chunks write less "
                              "than their budget, and SGLang's own admission queues what does not fit "
                              "(default: %(default)s)")
    starvation_bound: int = flag(256, "--starvation-bound", "once per this many dispatches, the sample "
                                 "that has waited longest goes first, if it has waited that many (default: %(default)s)")
    whole_tail: bool = flag(False, "--whole-tail", "in the rollout's tail (every waiting sample fits with its "
                            "whole remaining budget) send each sample for all of it instead of one more chunk",
                            action="store_true")
    # A continuation stays on its instance unless another is less loaded by this share of capacity
    # (plus the share of the chunk's time that moving adds).
    affinity_slack: float = 0.05
    # Without --chunk-size: a sample's chunks are this share of its max_new_tokens, and at least min_chunk
    auto_chunks: int = 8
    min_chunk: int = 512

    def smallest_chunk(self) -> int:
        """The shortest chunk a dispatch may have (pages longer than a quarter of it are not offered)."""
        return self.chunk_size if self.chunk_size is not None else self.min_chunk

    def policy_kwargs(self) -> dict[str, Any]:
        return {"chunk_size": self.chunk_size, "kv_headroom": self.kv_headroom,
                "starvation_bound": self.starvation_bound, "affinity_slack": self.affinity_slack,
                "whole_tail": self.whole_tail}


@dataclass(frozen=True)
class RolloutConfig:
    mixed_weight_versions: bool = flag(False, "--mixed-weight-versions", "let a sample continue across a "
                                       "weight update, as SGLang does (asynchronous RL with partial rollouts); "
                                       "each token's weight version is reported. Default: a sample whose "
                                       "weights change under it is generated again from its prompt on the new "
                                       "weights, so every sample comes from one version", action="store_true")
    instance_down_s: float = flag(30.0, "--instance-down-s", "an instance that has failed its load polls this "
                                  "long (a hung, stopped or overloaded process) has its running chunks given "
                                  "up and sent elsewhere; it gets work again once it answers "
                                  "(default: %(default)s)")
    # Calls to the instances. Connection failures are retried by httpx's transport (nothing was sent,
    # so a retry cannot run a request twice); a chunk that still fails is sent to another instance.
    connect_timeout_s: float = flag(5.0, "--instance-connect-timeout-s", "longest wait to connect to an "
                                    "instance (default: %(default)s)")
    instance_retries: int = flag(2, "--instance-retries", "times a connection to an instance that failed is "
                                 "tried again before the call fails (default: %(default)s)")
    poll_timeout_s: float = flag(5.0, "--instance-poll-timeout-s", "longest wait for an instance's load poll, "
                                 "health check or metrics; one that takes longer counts as failed "
                                 "(default: %(default)s)")
    chunk_timeout_s: float = flag(0.0, "--chunk-timeout-s", "longest wait for the next bytes of a chunk's "
                                  "answer, after which the chunk goes to another instance from the tokens it "
                                  "has; 0 = no limit, a stalled instance is found by its polls "
                                  "(--instance-down-s) (default: %(default)s)")
    info_timeout_s: float = flag(60.0, "--instance-info-timeout-s", "longest wait for an instance to answer a "
                                 "read the frontend forwards (server and model info, health_generate, weight "
                                 "version) (default: %(default)s)")
    admin_timeout_s: float = flag(900.0, "--admin-timeout-s", "longest wait for an instance to answer a weight "
                                  "update or sleep-mode call fanned out to it (loading weights may take "
                                  "minutes); 0 = no limit (default: %(default)s)")
    control_timeout_s: float = flag(10.0, "--control-timeout-s", "longest wait for an instance to answer an abort, "
                                    "pause, continue or cache flush fanned out to it; one that does not is named "
                                    "in the answer, and the others' answers are not held up (default: %(default)s)")


@dataclass(frozen=True)
class KVPoolConfig:
    kind: Optional[str] = flag(None, "--kv-pool", "global KV pool shared by the instances, so a chunk that moves "
                               "loads its KV instead of recomputing it: file = host DRAM tier + a shared directory, "
                               "mooncake = a Mooncake store, none = off, auto = file or none and the page size as "
                               "the cost model of load vs recompute decides for this model, logged with the "
                               "figures (default when starting instances)", choices=KV_POOLS)
    directory: Optional[str] = flag(None, "--kv-pool-dir", "file pool: the shared directory (default: a fresh "
                                    "one under the log dir, removed at exit)")
    size_gb: float = flag(16.0, "--kv-pool-size-gb", "file pool: size bound; the oldest pages are evicted past "
                          "it (default: %(default)s)")
    mooncake_config: Optional[str] = flag(None, "--kv-pool-config", "mooncake: JSON file with the store client "
                                          "config of an existing Mooncake cluster (multi-node); without it a "
                                          "master + store are started on --kv-pool-host")
    host: str = flag(LOOPBACK, "--kv-pool-host", "mooncake: the address the local store binds (its REST API, "
                     "master and transfer-engine ports) and announces (default: loopback only). None of them "
                     "authenticates: on several nodes, name an interface only the instances' machines reach")
    transfer_starvation_steps: int = flag(4, "--transfer-starvation-steps", "pool transfers yield to decode "
                                          "steps, but wait at most this many (weighted); 0 = never yield "
                                          "(default: %(default)s)")
    write_wait_ms: float = flag(2000.0, "--kv-pool-write-wait-ms", "an instance answers a finished chunk only "
                                "once its KV pages are in the pool, waiting at most this long, so a move or a "
                                "lost instance finds them; 0 = answer at once (default: %(default)s)")
    page_size: int = 16  # tokens per KV page when the SGLang flags give no --page-size and the pool is named
    # --kv-pool auto: the cost model's inputs. A file pool reads and writes one file per page: measured by
    # benchmarks.kv_pool on the 2-core CPU (a load grows by 81 ms per 128 pages, whatever their bytes).
    file_page_io_s: float = 6.3e-4
    file_bytes_per_s: float = 2e9  # a page file's bytes, read from or written to the page cache
    cpu_flops: float = 5e10  # prefill FLOP/s of one CPU instance (SmolLM2: 5.3 ms per token on 2 cores)
    gpu_flops: float = 4e14  # prefill FLOP/s of one GPU (dense bf16, H100 class, at ~40% of peak)
    moves_per_sample: float = 0.5  # moves to an instance that lacks the sample's context (2+ instances)
    noise_share: float = 0.05  # what the pool may cost a rollout where nothing moves, of its compute
    auto_page_sizes: tuple[int, ...] = (16, 32, 64, 128, 256)
    prefetch_timeout_s: float = flag(5.0, "--kv-pool-prefetch-timeout-s", "a continuation waits at most this "
                                     "long, plus 0.5 s per 1,024 tokens, for its pages from the pool, then "
                                     "recomputes them (default: %(default)s)")
    prefetch_timeout_per_ki_token_s: float = 0.5
    # SGLang only looks in L3 for a miss of at least this many tokens (its default, 256, would leave
    # short continuations recomputing).
    prefetch_threshold: int = 64
    # once the engine is idle this long, the frontend drops the file pool's pages written as long ago
    idle_clear_s: float = 30.0


@dataclass(frozen=True)
class DraftConfig:
    drafter: str = flag("group-suffix", "--draft", "speculative decoding with model-free drafts, verified "
                        "losslessly by each instance: group-suffix = one suffix tree per prompt group, fed by all "
                        "siblings wherever they run (default), suffix = each request's own history only, sam = "
                        "suffix automaton, none = off", choices=DRAFT_MODES)
    draft_tokens: Optional[int] = flag(None, "--draft-tokens", "most draft tokens verified per request and "
                                       "step (default: 32 in the ragged verify, where the budget gives each "
                                       "request its own width; 8 in the full and bucketed ones, which pad to a "
                                       "width)")
    # The tree's nodes are taken by score whatever the cap, so more branches cost no verify: on the recorded
    # texts 16 paths earn 3-5% more tokens per step than 4 at 32 draft tokens, the same at 8.
    draft_paths: int = flag(16, "--draft-paths", "most branches of one draft tree (default: %(default)s)")
    budget: str = flag("adaptive", "--draft-budget", "drafts verified per request and step: adaptive = the "
                       "batch's best draft length from a step-cost model, shared out by acceptance odds with "
                       "long-tail requests weighted 2x, off when it does not pay (default); threshold = all "
                       "drafts up to batch size 32, none above; full = all drafts always", choices=BUDGETS)
    cost_path: Optional[str] = flag(None, "--draft-cost", "profile for the adaptive budget: JSON with base_s/"
                                    "per_seq_s/per_token_s/accept_curve, or a step model written by "
                                    "benchmarks.rollout; without it each instance fits its own step times as it "
                                    "runs (CPU) or verifies full drafts (GPU)")
    verify_layout: str = flag("auto", "--verify-layout", "how a speculative step lays out its verify: ragged = only "
                              "the drafts the budget gave out go through the model; bucketed = the budget decides "
                              "as in ragged, and every request is padded to the smallest of a few fixed widths "
                              "(1, 2, 4, ... and the full width) that holds the batch's longest draft: the shapes "
                              "a device captures one graph per width for; full = every draft verified at the full "
                              "width, the budget unused; auto = ragged on CPU, full on GPU (default)",
                              choices=VERIFY_LAYOUTS)
    group_ttl_s: float = 600.0  # a group idle this long leaves the draft server and the instances' drafters
    # The draft server holds at most this many response tokens (its index costs a few times their 4
    # bytes each); past it the groups idle longest leave first, whatever their TTL.
    max_store_tokens: int = 16_000_000
    min_score: float = 0.01  # draft nodes whose estimated acceptance is below this are not drafted
    sync_interval_s: float = 0.02  # how often an instance's draft client syncs with the draft server
    server_timeout_s: float = flag(2.0, "--draft-server-timeout-s", "an instance's call to the draft server "
                                   "that gets no answer this long counts as lost: the instance drafts from "
                                   "its own replica and reconnects (default: %(default)s)")


@dataclass(frozen=True)
class SLOConfig:
    """Requests with an ``slo`` beside a rollout (credit batching, VBS admission, TTFT guard)."""

    headroom: float = flag(0.9, "--slo-headroom", "share of its TPOT SLO an SLO request keeps to on average: "
                           "each decode step takes the best-effort samples that fit in the time its pace leaves "
                           "(by the instance's step-time model, the prefills between steps and the model's "
                           "errors paid back from measured time), and an SLO request is admitted when a step "
                           "of the virtual batch fits in this share of the tightest SLO (default: %(default)s)")
    min_fit_steps: int = 16  # decode steps an instance times before it trusts its own step-time fit
    report_interval_s: float = 1.0  # how often the frontend reads the instances' step-time fits


@dataclass(frozen=True)
class EmulationConfig:
    profile: Optional[str] = flag(None, "--emulate", "EMULATION, not a GPU measurement: pad every forward step "
                                  "of every instance to the time a step-time profile gives for its batch "
                                  "(h100-70b, h100-70b-v2, moe-kimi-k2, cpu-smollm2 from seer_sglang/profiles, or a JSON file)")
    time_scale: float = flag(1.0, "--emulate-time-scale", "stretch every emulated time by this factor, so the "
                             "real model's steps stay below the emulated ones (default: %(default)s)")
    length_scale: float = flag(1.0, "--emulate-length-scale", "the workload's lengths relative to the "
                               "profile's: each instance holds this share of the profile's KV tokens, and a KV "
                               "token costs 1/this as much to read (default: %(default)s)")
    step_log: Optional[str] = flag(None, "--emulate-step-log", "write every emulated forward step of every "
                                   "instance as a JSON line to PREFIX.<pid> (its end, kind, modelled time, "
                                   "lateness, rids, KV tokens, request lengths), and each request reaching the "
                                   "queue: where a run and the simulator part ways")
    max_overrun_share: float = 0.05  # a run with more steps slower than the model measured the host


@dataclass(frozen=True)
class PluginConfig:
    """What the seer plugin inside an SGLang instance reads from its environment."""

    drafter: str = env_only(DraftConfig.drafter, "SEER_SPEC_DRAFTER", "drafter name, or module:callable")
    draft_server: Optional[str] = env_only(None, "SEER_DRAFT_SERVER", "the draft server's ZeroMQ address")
    draft_server_timeout_s: float = env_only(DraftConfig.server_timeout_s, "SEER_DRAFT_SERVER_TIMEOUT_S",
                                             "a draft-server call without an answer this long is lost")
    budget: str = env_only(DraftConfig.budget, "SEER_DRAFT_BUDGET", "draft budget")
    cost_path: Optional[str] = env_only(None, "SEER_DRAFT_COST", "profile file of the adaptive budget")
    verify_layout: str = env_only(DraftConfig.verify_layout, "SEER_VERIFY_LAYOUT", "the verify's layout: auto, "
                                  "ragged, bucketed or full")
    transfer_scheduler: bool = env_only(False, "SEER_TRANSFER_SCHEDULER", "pool transfers yield to decode")
    transfer_starvation_steps: int = env_only(KVPoolConfig.transfer_starvation_steps,
                                              "SEER_TRANSFER_STARVATION_STEPS", "bound on a transfer's wait")
    pool_write_wait_s: float = env_only(0.0, "SEER_POOL_WRITE_WAIT_S", "a finished chunk's answer waits at most "
                                        "this long for its KV pages to reach the pool (0: off)")
    emulate: Optional[str] = env_only(None, "SEER_EMULATE", "step-time profile the forward steps are padded to")
    emulate_time_scale: float = env_only(EmulationConfig.time_scale, "SEER_EMULATE_TIME_SCALE",
                                         "factor on every emulated time")
    emulate_length_scale: float = env_only(EmulationConfig.length_scale, "SEER_EMULATE_LENGTH_SCALE",
                                           "the workload's lengths relative to the profile's")
    emulate_step_log: Optional[str] = env_only(None, "SEER_EMULATE_STEP_LOG", "prefix of the file each instance "
                                               "writes its emulated steps to")
    slo_headroom: float = env_only(SLOConfig.headroom, "SEER_SLO_HEADROOM", "share of its TPOT SLO an SLO "
                                   "request keeps to on average")
    emulation_only: bool = env_only(False, "SEER_EMULATION_ONLY", "install the step emulation and no other "
                                    "hook: plain SGLang on emulated steps (the benchmark baseline)")

    def to_env(self) -> dict[str, str]:
        """The environment that gives an instance this config (unset fields stay unset)."""
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or value is False:
                continue
            env[f.metadata["env"]] = "1" if value is True else str(value)
        return env

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "PluginConfig":
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if not raw:
                continue
            default = f.default
            if isinstance(default, bool):
                values[f.name] = raw == "1"
            elif isinstance(default, int):
                values[f.name] = int(raw)
            elif isinstance(default, float):
                values[f.name] = float(raw)
            else:
                values[f.name] = raw
        return cls(**values)


@dataclass(frozen=True)
class SeerConfig:
    frontend: FrontendConfig = field(default_factory=FrontendConfig)
    instances: InstancesConfig = field(default_factory=InstancesConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    kv_pool: KVPoolConfig = field(default_factory=KVPoolConfig)
    draft: DraftConfig = field(default_factory=DraftConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)


SECTIONS = {"frontend": FrontendConfig, "instances": InstancesConfig, "scheduler": SchedulerConfig,
            "rollout": RolloutConfig, "kv_pool": KVPoolConfig, "draft": DraftConfig, "emulation": EmulationConfig,
            "slo": SLOConfig}

# The defaults, for pure code that takes them as keyword defaults.
FRONTEND = FrontendConfig()
SCHEDULER = SchedulerConfig()
ROLLOUT = RolloutConfig()
KV_POOL = KVPoolConfig()
SLO_CONFIG = SLOConfig()
DRAFT = DraftConfig()
INSTANCES = InstancesConfig()
EMULATION = EmulationConfig()


def _dest(section: str, name: str) -> str:
    return f"{section}.{name}"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """Every Seer flag, from the field metadata of the sections."""
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if "flag" not in meta:
                continue
            kwargs: dict[str, Any] = {"dest": _dest(section, f.name), "default": f.default, "help": meta["help"]}
            if meta["action"]:
                kwargs["action"] = meta["action"]
            else:
                kwargs["type"] = _flag_type(f)
                if meta["choices"]:
                    kwargs["choices"] = list(meta["choices"])
                else:
                    kwargs["metavar"] = f.name.upper()
                if meta["nargs"]:
                    kwargs["nargs"] = meta["nargs"]
            group.add_argument(meta["flag"], **kwargs)


def _flag_type(f: dataclasses.Field):
    annotation = str(f.type)
    for name, kind in (("int", int), ("float", float)):
        if annotation in (name, f"Optional[{name}]"):
            return kind
    return str


def from_namespace(ns: argparse.Namespace) -> SeerConfig:
    """The config of parsed flags (``add_flags``)."""
    sections = {}
    for section, cls in SECTIONS.items():
        values = {}
        for f in dataclasses.fields(cls):
            dest = _dest(section, f.name)
            if hasattr(ns, dest):
                value = getattr(ns, dest)
                values[f.name] = tuple(value) if isinstance(value, list) else value
        sections[section] = cls(**values)
    return SeerConfig(**sections)


def flag_names() -> list[str]:
    return [f.metadata["flag"] for cls in SECTIONS.values() for f in dataclasses.fields(cls) if "flag" in f.metadata]
