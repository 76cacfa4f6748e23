"""Client of MooreEval's HTTP API, and reward adapters for Python RL frameworks.

Only the standard library: it runs inside any trainer's environment.
    from musacoder_client import MooreEvalClient, reward_of, InfraError
    from musacoder_client.adapters import verl_compute_score, trl_reward, ...
"""
from .client import ClientError, InfraError, MooreEvalClient, reward_of

__all__ = ["ClientError", "InfraError", "MooreEvalClient", "reward_of"]
