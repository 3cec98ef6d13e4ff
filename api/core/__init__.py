"""What every router of the API shares: RFC 9457 problem details and the mapping of Loom's
errors to HTTP statuses (:mod:`api.core.problems`), the request dependencies, i.e. bearer-token
authentication, roles and ``If-Match`` (:mod:`api.core.deps`), and the request and response
schemas (:mod:`api.core.schemas`, :mod:`api.core.schemas_changes`). The routers import it and
:mod:`api.app` wires both, so the packages import one way."""
