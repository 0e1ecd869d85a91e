"""What holds a task back: time limits, rate limits, the pool's gate and budget, retry policies,
breakers.
"""
