"""The S3 settings of the standard AWS configuration (the environment, then the profile), read in one place for
delta-rs, the lake's store and Spark's s3a (`runtime.spark_settings.lake_conf`)."""

from __future__ import annotations

import configparser
import os

S3_SCHEMES = ("s3://", "s3a://")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _profile() -> dict[str, str]:
    """The static settings of the AWS profile in use (`AWS_PROFILE`, else `default`), from the shared credentials and
    config files; {} when there is none. Only keys, session token, region and endpoint: what a local or
    S3-compatible store needs (delta-rs resolves richer profiles itself, but obstore and the Spark conf need these).
    """
    name = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    found: dict[str, str] = {}
    files = [
        (os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config", "default" if name == "default" else f"profile {name}"),
        (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials", name),
    ]
    for path, section in files:
        parser = configparser.ConfigParser()
        try:
            parser.read(os.path.expanduser(path))
        except configparser.Error:
            continue
        if parser.has_section(section):
            found.update(parser[section])
    return found


def aws_settings() -> dict[str, str]:
    """The S3 settings of the standard AWS configuration: the environment first, then the profile.

    Keys are `object_store`'s (and delta-rs's) names: endpoint, access key, secret, session token, region, allow_http.
    `allow_http` is on when AWS_ALLOW_HTTP says so or the endpoint is `http://`.
    """
    env, profile = os.environ, _profile()
    settings = {
        "aws_endpoint_url": env.get("AWS_ENDPOINT_URL_S3")
        or env.get("AWS_ENDPOINT_URL")
        or profile.get("endpoint_url", ""),
        "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID") or profile.get("aws_access_key_id", ""),
        "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY") or profile.get("aws_secret_access_key", ""),
        "aws_session_token": env.get("AWS_SESSION_TOKEN") or profile.get("aws_session_token", ""),
        "aws_region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or profile.get("region", ""),
    }
    if env.get("AWS_ACCESS_KEY_ID"):  # keys from the environment: not mixed with a profile's session token
        settings["aws_session_token"] = env.get("AWS_SESSION_TOKEN", "")
    settings = {k: v for k, v in settings.items() if v}
    if _truthy(env.get("AWS_ALLOW_HTTP")) or settings.get("aws_endpoint_url", "").startswith("http://"):
        settings["aws_allow_http"] = "true"
    return settings


def on_object_store(*paths: str) -> str | None:
    """The first of `paths` on S3 (a lake, or a Delta table of another job read as an input), or None."""
    return next((p for p in paths if p.startswith(S3_SCHEMES)), None)
