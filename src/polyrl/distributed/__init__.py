"""Scale-out on Ray: rollout and environment worker actors, synchronous or asynchronous generation.

Nothing here imports Ray at module import time; ``backend: ray`` loads it when the trainer starts.
"""

from polyrl.distributed.ray_config import RayConfig

__all__ = ["RayConfig"]
