"""The REST API behind API Gateway: routes (:mod:`.app`), problem details (:mod:`.problems`),
wiring from settings (:mod:`.wiring`), tenancy, paging tokens, and a loopback server for
local mode and tests (:mod:`.local_server`)."""
