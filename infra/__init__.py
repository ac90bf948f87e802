"""CDK app for Engram on AWS: one construct per concern and the stack that composes them.

Never imported by runtime code (functions/)."""
