"""Every named limit in one place, each with why it is what it is.

One module per part of the gateway that the limits bound; every name is read from here
(``from gateway.core.limits import X``), so a limit is looked up in one place whichever module holds it.
"""

from gateway.core.limits.approvals import *  # noqa: F403
from gateway.core.limits.auth import *  # noqa: F403
from gateway.core.limits.edge import *  # noqa: F403
from gateway.core.limits.flow import *  # noqa: F403
from gateway.core.limits.models import *  # noqa: F403
from gateway.core.limits.policy import *  # noqa: F403
from gateway.core.limits.sso import *  # noqa: F403
from gateway.core.limits.store import *  # noqa: F403
from gateway.core.limits.upstreams import *  # noqa: F403
