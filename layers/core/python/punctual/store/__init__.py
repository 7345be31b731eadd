"""Storage: the JobStore port and its DynamoDB and in-memory implementations."""
