"""The translation server: its app, engines, request schema, limits and batcher."""
