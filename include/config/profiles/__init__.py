"""The cluster profiles' rules on section ``cluster``, by name (``cluster.profile``).

Adding a profile: a module here with its :class:`~include.config.profiles.base.ClusterProfileRules`
subclass, one line in :data:`CLUSTER_PROFILES`, and its runtime part in
:mod:`include.orchestration.profiles` (one line in that registry too).
"""

from __future__ import annotations

from include.config.profiles.base import ClusterProfileRules
from include.config.profiles.existing_master import ExistingMasterRules
from include.config.profiles.kubernetes import KubernetesRules
from include.config.profiles.local_standalone import LocalStandaloneRules

#: Every cluster profile's rules, by name; the first is the default.
CLUSTER_PROFILES: dict[str, ClusterProfileRules] = {
    rules.name: rules for rules in (LocalStandaloneRules(), ExistingMasterRules(), KubernetesRules())
}
#: The profile of a pipeline file that names none.
DEFAULT_PROFILE = next(iter(CLUSTER_PROFILES))

__all__ = ["CLUSTER_PROFILES", "DEFAULT_PROFILE", "ClusterProfileRules"]
