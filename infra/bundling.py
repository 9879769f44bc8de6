"""The Lambda code of Torpor's functions, and of the example handler, as directories pip fills.

- `CONTROL_PLANE`: `control_plane/`, `http_api/`, `adapters/`; `requirements.txt`; python3.13 on arm64
  (AL2023); aarch64 wheels manylinux_2_28 or 2014.
- `EXAMPLE_HANDLER`: `examples/`, `adapters/`, `control_plane/`; `infra/example_handler/…`; python3.12
  on arm64 (AL2023); aarch64 wheels manylinux_2_28.

The example handler runs on python3.12 because restate-sdk 1.3.0 publishes its arm64 wheels for
glibc 2.28 only, newer than Amazon Linux 2 (glibc 2.26) has; python3.12 and python3.13 run on
Amazon Linux 2023 (glibc 2.34).

pip installs each set of requirements for Lambda's platform (`--platform`, `--python-version`,
wheels only), so a bundle builds on any machine with pip and network access to the package index,
whatever its own architecture. `sam build` makes the same directories from `template.yaml`.

`torpor_code()` and `example_handler_code()` are the CDK assets: bundled locally by `bundle` when
pip is there, else in the Lambda Python build image with the same pip command. Synthesis for
tests skips bundling altogether (the `aws:cdk:bundling-stacks` context set to `[]`, as
`infra.app.build_app(bundle=False)` does).

`python -m infra.bundling control-plane|example-handler OUTPUT_DIR` writes a bundle by hand.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The repository root: the source of the assets."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """What goes into one Lambda code directory, and for which runtime."""

    name: str
    """The command-line name of the bundle."""
    packages: tuple[str, ...]
    """Directories of the repository copied to the bundle's root (the importable packages)."""
    requirements: str
    """The requirements file pip installs, relative to the repository root."""
    python_version: str
    """The Lambda runtime's Python version (`python3.13` → `3.13`)."""
    platforms: tuple[str, ...]
    """pip `--platform` tags Lambda arm64 loads for that runtime."""

    def pip_install_command(self, target: str, requirements: str, python: str = "python") -> list[str]:
        """The pip command that installs `requirements` into `target` for this bundle's runtime.

        Args:
            target: The directory to install into.
            requirements: The requirements file.
            python: The interpreter that runs pip.
        """
        platforms = [arg for tag in self.platforms for arg in ("--platform", tag)]
        return [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            *platforms,
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
            "--only-binary=:all:",
            "--target",
            target,
            "-r",
            requirements,
        ]

    def build(self, output_dir: Path, *, python: str = sys.executable) -> None:
        """Write the bundle into `output_dir`: pip install the requirements, copy the packages.

        Args:
            output_dir: Where to write (created if missing; existing files are overwritten).
            python: The interpreter whose pip installs the requirements.

        Raises:
            subprocess.CalledProcessError: pip failed (no network, no wheel for the platform).
            OSError: The packages could not be copied.
        """
        output_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            self.pip_install_command(str(output_dir), str(REPO_ROOT / self.requirements), python), check=True
        )
        for package in self.packages:
            shutil.copytree(
                REPO_ROOT / package,
                output_dir / package,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                dirs_exist_ok=True,
            )

    def docker_command(self) -> list[str]:
        """The same build inside a Lambda Python build image (source at /asset-input)."""
        pip = " ".join(self.pip_install_command("/asset-output", f"/asset-input/{self.requirements}"))
        copy = " ".join(f"/asset-input/{package}" for package in self.packages)
        return [
            "bash",
            "-c",
            f"{pip} && cp -r {copy} /asset-output/ && find /asset-output -name __pycache__ -prune -exec rm -rf {{}} +",
        ]

    def asset_excludes(self) -> list[str]:
        """What the asset's source hash ignores (gitignore syntax): all but the packages and requirements."""
        keep = [*self.packages, self.requirements]
        patterns = ["/*"]
        for path in keep:
            parts = path.split("/")
            for depth in range(1, len(parts)):  # re-include each parent, then ignore its other entries
                parent = "/".join(parts[:depth])
                patterns += [f"!/{parent}/", f"/{parent}/*"]
            patterns.append(f"!/{path}")
        return [*patterns, "__pycache__/", "*.pyc"]


CONTROL_PLANE = Bundle(
    name="control-plane",
    packages=("control_plane", "http_api", "adapters"),
    requirements="requirements.txt",
    python_version="3.13",
    platforms=("manylinux_2_28_aarch64", "manylinux2014_aarch64"),
)
"""The control plane's functions (handlers `adapters.aws.lambda_app.*`)."""

EXAMPLE_HANDLER = Bundle(
    name="example-handler",
    packages=("examples", "adapters", "control_plane"),  # adapters.aws.checkpoints wraps the app
    requirements="infra/example_handler/requirements.txt",
    python_version="3.12",
    platforms=("manylinux_2_28_aarch64", "manylinux2014_aarch64"),
)
"""The example handler (`adapters.aws.checkpoints.handler` driving `examples.app:app`)."""

BUNDLES = {bundle.name: bundle for bundle in (CONTROL_PLANE, EXAMPLE_HANDLER)}


def code_asset(bundle: Bundle) -> Any:
    """The CDK `lambda.Code` asset of `bundle` (see the module doc). Imports aws-cdk-lib."""
    import aws_cdk as cdk
    import jsii
    from aws_cdk import aws_lambda as lambda_

    @jsii.implements(cdk.ILocalBundling)
    class LocalPipBundling:
        """Bundles with this machine's pip; returns False (so Docker is tried) when that fails."""

        def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
            try:
                bundle.build(Path(output_dir))
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"torpor: local bundling of {bundle.name} failed ({exc}); trying Docker", file=sys.stderr)  # noqa: T201
                return False
            return True

    runtime = {
        "3.11": lambda_.Runtime.PYTHON_3_11,
        "3.12": lambda_.Runtime.PYTHON_3_12,
        "3.13": lambda_.Runtime.PYTHON_3_13,
    }[bundle.python_version]
    return lambda_.Code.from_asset(
        str(REPO_ROOT),
        exclude=bundle.asset_excludes(),
        ignore_mode=cdk.IgnoreMode.GIT,
        bundling=cdk.BundlingOptions(
            image=runtime.bundling_image,
            command=bundle.docker_command(),
            local=LocalPipBundling(),
        ),
    )


def torpor_code() -> Any:
    """The CDK asset of the control plane's functions."""
    return code_asset(CONTROL_PLANE)


def example_handler_code() -> Any:
    """The CDK asset of the example handler."""
    return code_asset(EXAMPLE_HANDLER)


def main(argv: list[str] | None = None) -> int:
    """`python -m infra.bundling control-plane|example-handler OUTPUT_DIR`: write a bundle."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in BUNDLES:
        print(f"usage: python -m infra.bundling {'|'.join(BUNDLES)} OUTPUT_DIR", file=sys.stderr)  # noqa: T201
        return 2
    BUNDLES[args[0]].build(Path(args[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
