"""PyYAML for the chart scripts (mk/chart-check.py, mk/values-schema.py): the installed one, or a
copy installed once into the tools cache (works where pip --user may not)."""

import os
import subprocess
import sys
from pathlib import Path

PYYAML = "6.0.3"


def load_yaml_module():
    """PyYAML, installed into the tools cache the first time it is missing."""
    try:
        import yaml

        return yaml
    except ImportError:
        pass
    cache = Path(os.environ.get("ZAC_CACHE", Path.home() / ".cache" / "zone-aware-controllers"))
    target = cache / f"pyyaml-{PYYAML}"
    if not (target / "yaml").is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
             f"pyyaml=={PYYAML}"],
            check=True,
        )
    sys.path.insert(0, str(target))
    import yaml

    return yaml


yaml = load_yaml_module()
