"""What an application declares: App, tasks, signatures and canvas, options, settings, signals,
eager mode.
"""
