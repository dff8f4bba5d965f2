"""The HTTP side of the Kubernetes API double: real paths, real JSON shapes, Status errors.

    with KubeDouble() as kube:          # a ThreadingHTTPServer on 127.0.0.1, random port
        kube.state.add_node("gpu-0", labels={...}, gpus=8)
        kube.fail("POST", r"/jobs$", 500, times=2)    # the next two Job creations fail
        ... point the official client at kube.url with kube.token ...
        kube.state.jobs[("ns", "allot-w1-0")]["spec"]["suspend"]
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s_double.errors import ApiError, not_found
from tests.k8s_double.selectors import selector_matches
from tests.k8s_double.state import ClusterState, Fault

Handler = Callable[..., tuple[int, Any]]
WATCH_MAX_S = 60.0


@dataclass
class WatchRequest:
    """A `?watch=true` list: stream Job changes after `since` until `timeout_s`."""

    namespace: str | None
    selector: str | None
    since: int
    timeout_s: float
    log: str = "job_log"  # the state's change log it streams: job_log or pod_log


def _list(kind: str, api_version: str, items: list[dict], version: str) -> dict:
    return {
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": version},
        "items": items,
    }


class KubeDouble:
    """A Kubernetes API server double on loopback, serving one ClusterState."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, token: str = "double-token"):
        self.state = ClusterState()
        self.token = token
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._install_routes()
        self._install_kind_routes()
        double = self

        class RequestHandler(_RequestHandler):
            owner = double

        self.server = ThreadingHTTPServer((host, port), RequestHandler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def connection(self) -> dict[str, Any]:
        """A Cluster.connection that points the Kubernetes backend at this double."""
        return {"host": self.url, "token": self.token, "verify_ssl": False}

    def start(self) -> KubeDouble:
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="k8s-double", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
        self._thread = None

    def __enter__(self) -> KubeDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- test controls
    def fail(
        self, method: str, path: str, status: int | None = None, *, times: int = 1,
        message: str = "", delay_s: float = 0.0, apply: bool = True, after: int = 0,
    ) -> Fault:
        """Answer the next `times` calls whose path matches the regex `path` with `status`
        (a Status object carrying `message`), or just after `delay_s` seconds; the first
        `after` matching calls pass untouched."""
        fault = Fault(method=method.upper(), path=path, status=status, message=message,
                      times=times, delay_s=delay_s, apply=apply, after=after)
        with self.state.lock:
            self.state.faults.append(fault)
        return fault

    def forbid_namespace(self, namespace: str) -> None:
        """RBAC denies creating that namespace and anything in it (403)."""
        with self.state.lock:
            self.state.forbidden_namespaces.add(namespace)

    def requests(self, method: str | None = None, path: str | None = None) -> list[dict]:
        """The calls received so far, optionally filtered by method and path regex."""
        with self.state.lock:
            return [
                r for r in self.state.requests
                if (method is None or r["method"] == method)
                and (path is None or re.search(path, r["path"]))
            ]

    # -------------------------------------------------------------- routing
    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self._routes.append((method, re.compile(f"^{pattern}$"), fn))
            return fn

        return register

    def dispatch(
        self, method: str, path: str, query: dict[str, str], body: Any, content_type: str
    ) -> tuple[int, Any]:
        for route_method, pattern, fn in self._routes:
            match = pattern.match(path)
            if match and route_method == method:
                return fn(query=query, body=body, content_type=content_type, **match.groupdict())
        if any(p.match(path) for _, p, _ in self._routes):
            raise ApiError(405, f"the server does not allow this method on the requested "
                           f"resource ({method} {path})")
        raise ApiError(404, "the server could not find the requested resource")

    def _install_routes(self) -> None:  # noqa: C901 - a route table reads best in one place
        s = self.state
        NS = r"(?P<ns>[^/]+)"
        NAME = r"(?P<name>[^/]+)"

        @self.route("GET", "/version")
        def version(**_: Any) -> tuple[int, Any]:
            return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-allot-double"}

        @self.route("GET", "/api/v1/nodes")
        def list_nodes(query: dict, **_: Any) -> tuple[int, Any]:
            with s.lock:
                items = [n for n in s.nodes.values()
                         if selector_matches(query.get("labelSelector"), n["metadata"]["labels"])]
                return 200, _list("NodeList", "v1", items, s.next_version())

        @self.route("GET", f"/api/v1/nodes/{NAME}")
        def get_node(name: str, **_: Any) -> tuple[int, Any]:
            with s.lock:
                if name not in s.nodes:
                    raise not_found("nodes", name)
                return 200, s.nodes[name]

        @self.route("GET", "/api/v1/namespaces")
        def list_namespaces(**_: Any) -> tuple[int, Any]:
            with s.lock:
                return 200, _list("NamespaceList", "v1", list(s.namespaces.values()),
                                  s.next_version())

        @self.route("POST", "/api/v1/namespaces")
        def create_namespace(body: dict, **_: Any) -> tuple[int, Any]:
            return 201, s.create_namespace(body)

        @self.route("GET", f"/api/v1/namespaces/{NAME}")
        def get_namespace(name: str, **_: Any) -> tuple[int, Any]:
            with s.lock:
                if name in s.forbidden_namespaces:
                    raise ApiError(403, f'namespaces "{name}" is forbidden: User '
                                   '"system:serviceaccount:allot:allot" cannot get resource '
                                   '"namespaces" in API group "" in the namespace '
                                   f'"{name}"')
                if name not in s.namespaces:
                    raise not_found("namespaces", name)
                return 200, s.namespaces[name]

        def watch(namespace: str | None, query: dict) -> tuple[int, Any] | None:
            if query.get("watch") not in ("true", "1"):
                return None
            timeout = min(float(query.get("timeoutSeconds") or WATCH_MAX_S), WATCH_MAX_S)
            return 200, WatchRequest(namespace, query.get("labelSelector"),
                                     int(query.get("resourceVersion") or 0), timeout)

        @self.route("GET", "/apis/batch/v1/jobs")
        def list_all_jobs(query: dict, **_: Any) -> tuple[int, Any]:
            if (streaming := watch(None, query)) is not None:
                return streaming
            with s.lock:
                items = [j for j in s.jobs.values()
                         if selector_matches(query.get("labelSelector"),
                                             j["metadata"].get("labels") or {})]
                return 200, _list("JobList", "batch/v1", items, s.next_version())

        @self.route("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")
        def list_jobs(ns: str, query: dict, **_: Any) -> tuple[int, Any]:
            if (streaming := watch(ns, query)) is not None:
                return streaming
            with s.lock:
                items = [j for (n, _), j in s.jobs.items() if n == ns
                         and selector_matches(query.get("labelSelector"),
                                              j["metadata"].get("labels") or {})]
                return 200, _list("JobList", "batch/v1", items, s.next_version())

        @self.route("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")
        def create_job(ns: str, body: dict, **_: Any) -> tuple[int, Any]:
            return 201, s.create_job(ns, body)

        @self.route("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{NAME}")
        def get_job(ns: str, name: str, **_: Any) -> tuple[int, Any]:
            return 200, s.get_job(ns, name)

        @self.route("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{NAME}/status")
        def get_job_status(ns: str, name: str, **_: Any) -> tuple[int, Any]:
            return 200, s.get_job(ns, name)

        @self.route("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/{NAME}")
        def patch_job(ns: str, name: str, body: Any, content_type: str, **_: Any):
            return 200, s.patch_job(ns, name, body, content_type)

        @self.route("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/{NAME}")
        def delete_job(ns: str, name: str, query: dict, body: Any, **_: Any):
            propagation = query.get("propagationPolicy") or (body or {}).get("propagationPolicy")
            return 200, s.delete_job(ns, name, propagation)

        @self.route("GET", "/api/v1/pods")
        def list_all_pods(query: dict, **_: Any) -> tuple[int, Any]:
            if (streaming := watch(None, query)) is not None:
                streaming[1].log = "pod_log"
                return streaming
            with s.lock:
                items = [p for p in s.pods.values()
                         if selector_matches(query.get("labelSelector"),
                                             p["metadata"].get("labels") or {})]
                return 200, _list("PodList", "v1", items, s.next_version())

        @self.route("GET", f"/api/v1/namespaces/{NS}/pods")
        def list_pods(ns: str, query: dict, **_: Any) -> tuple[int, Any]:
            with s.lock:
                items = [p for (n, _), p in s.pods.items() if n == ns
                         and selector_matches(query.get("labelSelector"),
                                              p["metadata"].get("labels") or {})]
                return 200, _list("PodList", "v1", items, s.next_version())

        @self.route("POST", f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
        def create_event(ns: str, body: dict, **_: Any) -> tuple[int, Any]:
            return 201, s.create_event(ns, body)

        @self.route("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
        def list_events(ns: str, **_: Any) -> tuple[int, Any]:
            with s.lock:
                items = [e for e in s.events if e["metadata"]["namespace"] == ns]
                return 200, _list("EventList", "events.k8s.io/v1", items, s.next_version())

        @self.route("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")
        def list_priority_classes(**_: Any) -> tuple[int, Any]:
            with s.lock:
                return 200, _list("PriorityClassList", "scheduling.k8s.io/v1",
                                  list(s.priority_classes.values()), s.next_version())

        @self.route("POST", "/apis/scheduling.k8s.io/v1/priorityclasses")
        def create_priority_class(body: dict, **_: Any) -> tuple[int, Any]:
            return 201, s.create_priority_class(body)

        @self.route("GET", f"/apis/scheduling.k8s.io/v1/priorityclasses/{NAME}")
        def get_priority_class(name: str, **_: Any) -> tuple[int, Any]:
            with s.lock:
                if name not in s.priority_classes:
                    raise not_found("priorityclasses", name, "scheduling.k8s.io")
                return 200, s.priority_classes[name]

        @self.route("PATCH", f"/apis/scheduling.k8s.io/v1/priorityclasses/{NAME}")
        def patch_priority_class(name: str, body: Any, content_type: str, **_: Any):
            return 200, s.patch_priority_class(name, body, content_type)

        @self.route("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{NAME}")
        def delete_priority_class(name: str, **_: Any) -> tuple[int, Any]:
            with s.lock:
                pc = s.priority_classes.pop(name, None)
                if pc is None:
                    raise not_found("priorityclasses", name, "scheduling.k8s.io")
                return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success", "details": {"name": name,
                                                               "kind": "priorityclasses"}}


    def _install_kind_routes(self) -> None:
        """API discovery, pod deletion and the custom objects of every kind (kinds.py)."""
        s = self.state
        NS, NAME = r"(?P<ns>[^/]+)", r"(?P<name>[^/]+)"
        BASE = r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/" + NS + r"/(?P<plural>[^/]+)"

        @self.route("GET", "/apis")
        def api_groups(**_: Any) -> tuple[int, Any]:
            with s.lock:
                return 200, s.api_groups()

        @self.route("DELETE", f"/api/v1/namespaces/{NS}/pods/{NAME}")
        def delete_pod(ns: str, name: str, **_: Any) -> tuple[int, Any]:
            return 200, s.delete_pod(ns, name)

        @self.route("PATCH", f"/api/v1/namespaces/{NS}/pods/{NAME}")
        def patch_pod(ns: str, name: str, body: Any, content_type: str,
                      **_: Any) -> tuple[int, Any]:
            return 200, s.patch_pod(ns, name, body, content_type)

        @self.route("GET", r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?P<plural>[^/]+)")
        def list_all_objects(group: str, version: str, plural: str, query: dict, **_: Any):
            kind = s.kind_at(group, version, plural)
            items = [o for o in s.list_objects(group, version, plural, None)
                     if selector_matches(query.get("labelSelector"),
                                         o["metadata"].get("labels") or {})]
            return 200, _list(f"{kind.kind}List", kind.api_version, items, s.next_version())

        @self.route("GET", BASE)
        def list_objects(group: str, version: str, ns: str, plural: str, **_: Any):
            kind = s.kind_at(group, version, plural)
            return 200, _list(f"{kind.kind}List", kind.api_version,
                              s.list_objects(group, version, plural, ns), s.next_version())

        @self.route("POST", BASE)
        def create_object(group: str, version: str, ns: str, plural: str, body: dict,
                          **_: Any) -> tuple[int, Any]:
            return 201, s.create_object(group, version, plural, ns, body)

        @self.route("GET", f"{BASE}/{NAME}")
        def get_object(group: str, version: str, ns: str, plural: str, name: str, **_: Any):
            return 200, s.get_object(group, version, plural, ns, name)

        @self.route("PATCH", f"{BASE}/{NAME}")
        def patch_object(group: str, version: str, ns: str, plural: str, name: str,
                         body: Any, content_type: str, **_: Any) -> tuple[int, Any]:
            return 200, s.patch_object(group, version, plural, ns, name, body, content_type)

        @self.route("PUT", f"{BASE}/{NAME}")
        def replace_object(group: str, version: str, ns: str, plural: str, name: str,
                           body: Any, **_: Any) -> tuple[int, Any]:
            return 200, s.replace_object(group, version, plural, ns, name, body)

        @self.route("DELETE", f"{BASE}/{NAME}")
        def delete_object(group: str, version: str, ns: str, plural: str, name: str,
                          **_: Any) -> tuple[int, Any]:
            return 200, s.delete_object(group, version, plural, ns, name)


class _RequestHandler(BaseHTTPRequestHandler):
    owner: KubeDouble
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        return  # quiet: tests inspect `requests()` instead

    def _handle(self) -> None:
        status, payload = self._answer()
        if isinstance(payload, WatchRequest):
            self._stream(payload)
        else:
            self._send(status, payload)

    def _stream(self, request: WatchRequest) -> None:
        """Job change events as JSON lines in a chunked body, like the API server's watch."""
        state = self.owner.state
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + request.timeout_s
            since = request.since
            final = False
            while not final:
                with state.changed:
                    if since and since < state.compacted_before:
                        gone = ApiError(410, f"too old resource version: {since} "
                                        f"({state.compacted_before - 1})", reason="Expired")
                        events = [{"type": "ERROR", "object": gone.status_object()}]
                        final = True
                    else:
                        events = []
                        for rv, event_type, job in getattr(state, request.log):
                            if rv <= since:
                                continue
                            since = rv
                            meta = job["metadata"]
                            if request.namespace and meta["namespace"] != request.namespace:
                                continue
                            if selector_matches(request.selector, meta.get("labels") or {}):
                                events.append({"type": event_type, "object": job})
                    if not events:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        state.changed.wait(remaining)
                        continue
                for event in events:
                    self._chunk(json.dumps(event).encode() + b"\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the watcher went away

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _answer(self) -> tuple[int, Any]:
        owner = self.owner
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type", "")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return 400, ApiError(400, "the request body is not valid JSON").status_object()
        with owner.state.lock:
            owner.state.requests.append({
                "method": self.command, "path": path, "query": query,
                "content_type": content_type, "body": body,
                "authorization": self.headers.get("Authorization", ""),
            })
        if owner.token and self.headers.get("Authorization") != f"Bearer {owner.token}":
            return 401, ApiError(401, "Unauthorized").status_object()
        fault = owner.state.take_fault(self.command, path)
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
            if not fault.apply and fault.status is None:
                return 504, ApiError(504, "the server was unable to return a response in the "
                                     "time allotted").status_object()
        if fault is not None and fault.status is not None:
            message = fault.message or f"injected {fault.status} on {self.command} {path}"
            return fault.status, ApiError(fault.status, message).status_object()
        try:
            return owner.dispatch(self.command, path, query, body, content_type)
        except ApiError as error:
            return error.code, error.status_object()

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left; what happened on the server stays done

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle
