"""Talking to an EKS cluster's Kubernetes API without kubectl: the IAM bearer token and a small HTTPS client."""
