"""The pages the service serves to browsers: the Training panel and the admin page.

Both are thin: the server renders a skeleton in the hub's look and the panel's JavaScript
(``scheduler/service/static/``) fills it from the same REST API the CLI uses, sending the
``HubOAuth`` cookie and the XSRF token the page carries (see ``handlers/base.py``). So the
pages can never show something the API would refuse, and the API's refusal tests cover them.

URL map, under the service prefix (``/services/frachub/``):

- ``""``               the Training panel: one's workloads, submit form, projects
- ``admin``            queues, nodes and the GPU map with every user's shares (admin scope)
- ``oauth_callback``   the end of the hub's OAuth login ($JUPYTERHUB_OAUTH_CALLBACK_URL)
- ``static/...``       the panel's JavaScript and CSS

Login: a browser without the service's cookie is sent to the hub's OAuth authorize URL, and
comes back through ``oauth_callback`` with a cookie. The hub checks this page at start-up
(any non-5xx answer will do; a redirect is one).

Templates extend the hub's own ``page.html``, found the way JupyterHub's
``template_paths`` finds them: FracHub's ``templates/`` first, then the hub's templates, and
``templates/<name>`` always reaches the hub's original, so FracHub's ``page.html`` can extend
the hub's ``page.html`` and add the "Training" link to the navigation bar (the hub loads
the same ``page.html`` for its own pages).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web

from scheduler.common.paths import TEMPLATES_DIR
from scheduler.common.scopes import ADMIN_GROUP, lacking
from scheduler.engine.lifecycle import vocabulary
from scheduler.service.access import ADMIN, READ

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
HUB_TEMPLATES_DIR = Path(DATA_FILES_PATH) / "templates"
HUB_STATIC_DIR = Path(DATA_FILES_PATH) / "static"
COOKIE_SECRET_FILE = "cookie_secret"


def template_environment(
    own: Path = TEMPLATES_DIR, hub: Path = HUB_TEMPLATES_DIR
) -> jinja2.Environment:
    """FracHub's templates over the hub's, as JupyterHub's ``template_paths`` does it, so
    that the same ``templates/page.html`` dresses the hub's pages and ours."""
    loader = jinja2.ChoiceLoader(
        [
            jinja2.FileSystemLoader([str(own), str(hub)]),
            jinja2.PrefixLoader({"templates": jinja2.FileSystemLoader([str(hub)])}, "/"),
        ]
    )
    return jinja2.Environment(loader=loader, autoescape=True)


def cookie_secret(data_dir: str) -> bytes:
    """The key signing the login cookie: $FRACHUB_COOKIE_SECRET (hex), else a random key
    kept in ``<data_dir>/cookie_secret``, so a restart of the service keeps users logged in
    (a lost key only costs them a silent trip through the hub's login)."""
    explicit = os.environ.get("FRACHUB_COOKIE_SECRET", "").strip()
    if explicit:
        return bytes.fromhex(explicit)
    path = Path(data_dir) / COOKIE_SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_bytes(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret.hex())
    return secret


def page_settings(data_dir: str) -> dict[str, Any]:
    """The tornado settings the pages need, merged into the service's application."""
    return {
        "cookie_secret": cookie_secret(data_dir),
        "frachub_templates": template_environment(),
    }


def _versioned(prefix: str, root: Path, path: str, include_version: bool = True) -> str:
    url = f"{prefix}{path}"
    if include_version:
        version = web.StaticFileHandler.get_version({"static_path": str(root)}, path)
        if version:
            url += f"?v={version}"
    return url


@dataclass(frozen=True)
class PageUser:
    """What the hub's ``page.html`` reads of ``user``."""

    name: str

    @property
    def json_escaped_name(self) -> str:
        """For the inline ``<script>`` of page.html: no quote, and no ``</script>`` either."""
        escaped = json.dumps(self.name)[1:-1]
        return escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class PageRendering:
    """Rendering in the hub's look, for the pages and for the OAuth callback's errors: a
    mixin for tornado handlers (placed before ``HubOAuthenticated``), as that one is."""

    page = ""
    script = ""

    @property
    def hub_auth(self) -> HubOAuth:
        return self.settings["hub_auth"]

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", "frame-ancestors 'self'")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")

    @property
    def scopes(self) -> frozenset[str]:
        model = getattr(self, "_current_user", None) or {}
        return frozenset(model.get("scopes") or ())

    def namespace(self) -> dict[str, Any]:
        """What the hub's page.html reads (it is rendered by the hub with these names), and
        what FracHub's templates add, all ``frachub_*``."""
        model = getattr(self, "_current_user", None)
        hub = self.hub_auth.hub_prefix
        prefix = self.hub_auth.base_url
        return {
            "base_url": hub,
            "prefix": hub.removesuffix("hub/") or "/",
            "static_url": lambda path, include_version=True: _versioned(
                f"{hub}static/", HUB_STATIC_DIR, path, include_version
            ),
            "user": PageUser(model["name"]) if model else None,
            "admin_access": False,
            "no_spawner_check": True,
            # the hub's page.html shows its Admin link for "admin-ui", which the panel's
            # OAuth token carries for those who hold it (PANEL_SCOPES)
            "parsed_scopes": self.scopes,
            "services": [],
            "logo_url": None,
            "login_url": f"{hub}login",
            "logout_url": f"{hub}logout",
            "version_hash": "",
            "announcement": None,
            "xsrf_token": self.xsrf_token.decode("ascii"),
            "frachub_page": self.page,
            "frachub_panel_url": prefix,
            "frachub_admin_url": f"{prefix}admin",
            "frachub_api_url": f"{prefix}api/v1/",
            "frachub_static": lambda path: _versioned(f"{prefix}static/", STATIC_DIR, path),
            "frachub_script": self.script,
            "frachub_admin": ADMIN in self.scopes,
            "frachub_can_read": READ in self.scopes or ADMIN in self.scopes,
            "frachub_states": json.dumps(vocabulary()),
        }

    def render_page(self, template: str, **extra: Any) -> None:
        environment: jinja2.Environment = self.settings["frachub_templates"]
        html = environment.get_template(template).render(**self.namespace(), **extra)
        self.finish(html)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors as the hub shows them, in FracHub's page.html with the user's name and
        Logout (frachub/error.html)."""
        message = self._reason
        exc_info = kwargs.get("exc_info")
        if exc_info and isinstance(exc_info[1], web.HTTPError) and exc_info[1].log_message:
            error = exc_info[1]
            message = error.log_message % error.args if error.args else error.log_message
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.render_page(
            "frachub/error.html",
            status_code=status_code,
            status_message=self._reason,
            message=message,
        )


class PageHandler(PageRendering, HubOAuthenticated, web.RequestHandler):
    """A page for a logged-in hub user; anyone else is sent through the hub's login."""

    template = ""

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            if self.request.method in ("GET", "HEAD"):
                self.redirect(self.get_login_url())
                return
            raise web.HTTPError(403, "Log in through the hub first.")
        self.current_user = model  # named on the error page too, with Logout
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise web.HTTPError(
                403,
                f"{model['name']} may not use FracHub: the hub grants no "
                f"{' or '.join(sorted(self.hub_auth.access_scopes))}. Ask an admin.",
            )

    async def get(self) -> None:
        self.render_page(self.template)


class PanelHandler(PageHandler):
    """The Training panel: one's jobs and notebooks, the submit form, one's projects."""

    template = "frachub/panel.html"
    page = "panel"
    script = "panel.js"


class AdminHandler(PageHandler):
    """Queues, nodes and the GPU map with every user's shares; needs the admin scope."""

    template = "frachub/admin.html"
    page = "admin"
    script = "admin.js"

    async def get(self) -> None:
        if ADMIN not in self.scopes:
            model = getattr(self, "_current_user", None) or {}
            reason = lacking(
                ADMIN, "your login to FracHub", admin_group=ADMIN_GROUP in model.get("groups", ())
            )
            raise web.HTTPError(403, f"The FracHub admin page needs the scope {ADMIN}: {reason}.")
        self.render_page(self.template)


class OAuthCallbackHandler(PageRendering, HubOAuthCallbackHandler):
    """The hub's ``HubOAuthCallbackHandler``, with the service's own ``HubOAuth``; its
    errors ("oauth state does not match. Try logging in again.") in the hub's look."""


class StaticHandler(web.StaticFileHandler):
    """``static/…``: the panel's JavaScript and CSS (versioned URLs are cached for long)."""

    def initialize(self) -> None:  # type: ignore[override]
        super().initialize(str(STATIC_DIR))


default_handlers = [
    (r"/?", PanelHandler),
    (r"/admin/?", AdminHandler),
    (r"/oauth_callback/?", OAuthCallbackHandler),
    (r"/static/(.*)", StaticHandler),
]
