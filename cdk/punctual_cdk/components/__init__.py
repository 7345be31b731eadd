"""One construct per concern: storage, queues, functions, dispatch, workers, api, observability."""
