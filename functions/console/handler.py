"""Console Lambda: the CloudWatch dashboard's custom widget (jobs, runs, failures, fire delay).

CloudWatch invokes it with ``widgetContext`` and the widget's parameters and shows the HTML
string it returns. Reading and rendering live in :mod:`punctual.console`; local mode serves
the same page at ``/console``.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.console.service import widget_html

logger, tracer = Logger(), Tracer()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> str:
    return widget_html(event, context.invoked_function_arn)
