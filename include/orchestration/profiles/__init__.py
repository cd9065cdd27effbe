"""The cluster profiles' runtime parts, by name (``cluster.profile``): how a run's jobs are submitted.

Adding a profile: a module here with a class that meets :class:`~include.orchestration.profiles.base.ClusterProfile`
(:class:`~include.orchestration.profiles.base.DriverHereProfile` has the defaults of a driver on this
machine), one line in :data:`PROFILES`, and its rules on the pipeline file in :mod:`include.config.profiles`
(one line in that registry too).
"""

from __future__ import annotations

from include.config import ClusterConfig
from include.orchestration.profiles.base import ClusterProfile
from include.orchestration.profiles.existing_master import ExistingMaster
from include.orchestration.profiles.kubernetes import Kubernetes
from include.orchestration.profiles.local_standalone import LocalStandalone

#: Every cluster profile's runtime part, by name.
PROFILES: dict[str, ClusterProfile] = {
    profile.name: profile for profile in (LocalStandalone(), ExistingMaster(), Kubernetes())
}


def profile_of(cluster: ClusterConfig) -> ClusterProfile:
    """The runtime part of ``cluster``'s profile (the pipeline file's rules made sure it is registered)."""
    return PROFILES[cluster.profile]


__all__ = ["PROFILES", "ClusterProfile", "profile_of"]
