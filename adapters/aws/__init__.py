"""AWS adapters: the DynamoDB `Store` (pynamodb)."""

from adapters.aws.dynamodb_store import DynamoDBStore, ItemTooLarge

__all__ = ["DynamoDBStore", "ItemTooLarge"]
