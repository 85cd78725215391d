"""Chat models: choosing and loading one (init_chat_model or the offline model), and structured output with repair."""
