"""The REST API behind API Gateway: routes (:mod:`.app`), what is answered before routing
(:mod:`.resolver`), the OpenAPI document (:mod:`.openapi_doc`), problem details (:mod:`.problems`),
wiring from settings (:mod:`.wiring`), tenancy, paging tokens. Local mode and tests serve it
over HTTP with :mod:`local.api_gateway` (not part of the layer)."""
