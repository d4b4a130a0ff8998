"""An environment class written for TRL's ``GRPOTrainer(environment_factory=GuessEnv)``, which polyrl trains
unchanged as ``env/trl:trl_guess:GuessEnv`` over the rows of ``trl_guess_prompts.jsonl`` (``PYTHONPATH=examples``)."""

import random


class GuessEnv:
    def reset(self, high: int = 8, **kwargs) -> str:
        self.secret, self.solved = random.randint(1, high), False  # the class draws its own game
        return f" The number is from 1 to {high}."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: A whole number in the range the prompt gives.
        """
        if self.solved:
            raise ValueError("Game over.")
        if number == self.secret:
            self.solved = True
            return "Correct!"
        return "Higher." if number < self.secret else "Lower."

    def get_reward(self) -> float:
        return 1.0 if self.solved else 0.0
