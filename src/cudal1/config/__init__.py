"""Every stage's config, on one strict base (``StrictConfig``: unknown keys are an error, frozen).

Configs load from YAML and take ``a.b=value`` overrides through one mechanism
(``load_config``/``apply_overrides``); the resolved config is saved with every run
(``dump_config``). Finite choices are ``Literal``s checked at load. Secrets are never stored:
only the name of the environment variable that holds them.
"""

from cudal1.config.base import (
    ConfigError,
    Device,
    StrictConfig,
    apply_overrides,
    dump_config,
    load_config,
    validation_problems,
)
from cudal1.config.eval import (
    EvalConfig,
    GuardConfig,
    PoolConfig,
    RayPoolConfig,
    SandboxConfig,
    TimingConfig,
    ToleranceConfig,
)
from cudal1.config.search import (
    BudgetConfig,
    ComposeConfig,
    ExemplarConfig,
    FinalEvalConfig,
    LLMConfig,
    OptimizeConfig,
    Size,
    Suite,
    Transform,
)
from cudal1.config.train import (
    AuditConfig,
    AuditOutcome,
    CollectConfig,
    ExportConfig,
    GenerationBackend,
    GenerationSettings,
    GRPOStageConfig,
    LoraSettings,
    OptimSettings,
    RewardBar,
    RewardConfig,
    SamplingSettings,
    SelfSupConfig,
    SFTStageConfig,
    VLLMColocateSettings,
    VLLMServerSettings,
)

__all__ = [
    "AuditConfig",
    "AuditOutcome",
    "BudgetConfig",
    "CollectConfig",
    "ComposeConfig",
    "ConfigError",
    "Device",
    "EvalConfig",
    "ExemplarConfig",
    "ExportConfig",
    "FinalEvalConfig",
    "GRPOStageConfig",
    "GenerationBackend",
    "GenerationSettings",
    "GuardConfig",
    "LLMConfig",
    "LoraSettings",
    "OptimSettings",
    "OptimizeConfig",
    "PoolConfig",
    "RayPoolConfig",
    "RewardBar",
    "RewardConfig",
    "SFTStageConfig",
    "SamplingSettings",
    "SandboxConfig",
    "SelfSupConfig",
    "Size",
    "Suite",
    "StrictConfig",
    "TimingConfig",
    "ToleranceConfig",
    "Transform",
    "VLLMColocateSettings",
    "VLLMServerSettings",
    "apply_overrides",
    "dump_config",
    "load_config",
    "validation_problems",
]
